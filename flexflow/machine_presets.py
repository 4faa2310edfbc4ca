"""Machine presets: §8.1's two clusters, DGX H100 nodes, and this host as Legate sees it.

Datasheets give "GB" of GPU memory in GiB (nvidia-smi shows 16280 MiB on a 16 GB P100), and
interconnect rates per direction in decimal GB/s. Latencies are per link, so a route's latency is
the sum over its hops; they are estimates of the right order (a few us for a GPU-to-GPU copy,
about 1 us NIC to NIC through one InfiniBand switch), not measurements. Every constant names
its source.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

from flexflow.errors import MachineError
from flexflow.machine import Machine
from flexflow.machine_parts import Device, Link

GiB = 2**30


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """What every device of one model shares: its name, FP32 peak, memory bandwidth and capacity."""

    model: str
    peak_flops: float
    memory_bandwidth_bytes_per_s: float
    memory_bytes: int


# ---- GPUs ------------------------------------------------------------------------------------
# NVIDIA Tesla P100 SXM2 datasheet: 10.6 TFLOP/s FP32, 732 GB/s CoWoS HBM2, 16 GB.
P100 = DeviceModel("Tesla P100-SXM2", 10.6e12, 732e9, 16 * GiB)
# NVIDIA Tesla K80 datasheet, per board of two GK210 dies: 8.73 TFLOP/s FP32 with GPU Boost,
# 480 GB/s, 24 GB GDDR5. Frameworks (and the paper's "4 K80 GPUs per node") count each die as a
# GPU, so one device is half a board: 4.365 TFLOP/s, 240 GB/s, 12 GB.
K80_DIE = DeviceModel("Tesla K80 (one GK210)", 8.73e12 / 2, 480e9 / 2, 12 * GiB)
# NVIDIA H100 Tensor Core GPU datasheet, SXM5: 67 TFLOP/s FP32, 3.35 TB/s HBM3, 80 GB.
H100_SXM = DeviceModel("H100 SXM5", 67e12, 3.35e12, 80 * GiB)
# NVIDIA H200 Tensor Core GPU datasheet, SXM: the H100's 67 TFLOP/s FP32, 4.8 TB/s HBM3e; the
# "141 GB" read as nvidia-smi shows it on the H200 this project measured on (143771 MiB).
H200_SXM = DeviceModel("H200 SXM", 67e12, 4.8e12, 143771 * 2**20)

# ---- links (bytes/s per direction, seconds per hop) -------------------------------------------
# NVLink 1.0 (Tesla P100 whitepaper, "NVLink"): 20 GB/s per link per direction, 4 links per P100.
# A 4-GPU node is fully connected with one link per GPU pair (3 of each GPU's 4 links).
NVLINK1_BYTES_PER_S = 20e9
NVLINK_LATENCY_S = 2e-6  # a few us per GPU-to-GPU copy (CUDA p2pBandwidthLatencyTest order)
# NVLink 4 (H100 datasheet): 900 GB/s per GPU, i.e. 450 GB/s per direction into the NVSwitch fabric.
NVLINK4_BYTES_PER_S = 450e9
NVSWITCH_LATENCY_S = 1e-6  # per hop, GPU -> NVSwitch -> GPU is two hops
# PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 / 8 = 15.75 GB/s raw per direction; pinned
# cudaMemcpy (CUDA bandwidthTest) reaches about 12 GB/s, which we use.
PCIE3_X16_BYTES_PER_S = 12e9
# PCIe 5.0 x16: 32 GT/s x 16 x 128/130 / 8 = 63 GB/s raw; about 55 GB/s measured GPU to peer.
PCIE5_X16_BYTES_PER_S = 55e9
PCIE_LATENCY_S = 2e-6  # per PCIe hop, a few us per DMA copy
# Peer-to-peer traffic between two PCIe switches crosses the CPU root complex, which forwards
# it far slower than a switch does: CUDA's p2pBandwidthLatencyTest on Haswell-era hosts shows
# such pairs well below the ~12 GB/s of same-switch pairs. No datasheet gives a figure; we use
# 8 GB/s per direction, an estimate, so same-switch K80 pairs are strictly faster (§8.5).
HOST_BRIDGE_BYTES_PER_S = 8e9
HOST_BRIDGE_LATENCY_S = 3e-6
# InfiniBand, 4x links, 64b/66b encoding (InfiniBand Trade Association roadmap):
# EDR 4 x 25.78125 Gb/s -> 100 Gb/s of data = 12.5 GB/s (paper §8.1, P100 cluster);
# FDR 4 x 14.0625 Gb/s -> 54.5 Gb/s of data = 6.8 GB/s (paper §8.1, K80 cluster, "56");
# NDR 400 Gb/s = 50 GB/s (DGX H100 user guide: 8 x ConnectX-7 400 Gb/s compute ports).
EDR_BYTES_PER_S = 12.5e9
FDR_BYTES_PER_S = 6.8e9
NDR_BYTES_PER_S = 50e9
IB_LATENCY_S = 0.5e-6  # per hop; NIC -> switch -> NIC is about 1 us
# NICs sit on a PCIe 3.0 x16 slot (ConnectX-4 EDR adapters are x16), faster than FDR and EDR,
# so the network stays the bottleneck of inter-node transfers.
NIC_PCIE_BYTES_PER_S = PCIE3_X16_BYTES_PER_S

# ---- CPU cores (the `local` machine) ----------------------------------------------------------
# Per core: 2 FMA pipes x 8 FP32 lanes (AVX2, 256-bit) x 2 FLOP per FMA x ~2.5 GHz = 80 GFLOP/s
# (Intel Haswell and later, AMD Zen 2 and later have two 256-bit FMA pipes). An estimate.
CPU_CORE_PEAK_FLOPS = 2 * 8 * 2 * 2.5e9
# One core streams ~10-20 GB/s from DRAM (STREAM triad), and a socket's 100-300 GB/s shared by
# 16-64 cores gives a similar share: 10 GB/s per core, an estimate.
CPU_CORE_MEMORY_BYTES_PER_S = 10e9
# Cores exchange data through shared memory: a copy at about one core's memory bandwidth, ~1 us.
MEMORY_LINK_BYTES_PER_S = 10e9
MEMORY_LINK_LATENCY_S = 1e-6
DEFAULT_HOST_MEMORY_BYTES = 16 * GiB  # only if neither sysconf nor /proc/meminfo answers


@dataclass
class _Builder:
    """Accumulates one machine's devices, switches and duplex links (private, used in one call)."""

    name: str
    devices: list[Device] = field(default_factory=list)
    switches: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)

    def device(self, name: str, kind: str, node: int, spec: DeviceModel) -> str:
        self.devices.append(
            Device(id=len(self.devices), name=name, kind=kind, node=node, **asdict(spec))
        )
        return name

    def switch(self, name: str) -> str:
        self.switches.append(name)
        return name

    def duplex(self, kind: str, a: str, b: str, bandwidth: float, latency_s: float) -> None:
        """Both directions of one full-duplex connection, as two Links."""
        for src, dst in ((a, b), (b, a)):
            name = _link_name(kind, src, dst)
            self.links.append(Link(len(self.links), name, kind, src, dst, bandwidth, latency_s))

    def build(self) -> Machine:
        return Machine(self.name, tuple(self.devices), tuple(self.switches), tuple(self.links))


def _link_name(kind: str, src: str, dst: str) -> str:
    """'n0.nvlink.gpu0->gpu1' inside a node, 'infiniband.n0.nic0->ib_switch' between places."""
    node, dot, _ = src.partition(".")
    prefix = node + dot
    if dot and dst.startswith(prefix):
        return f"{prefix}{kind}.{src[len(prefix) :]}->{dst[len(prefix) :]}"
    return f"{kind}.{src}->{dst}"


def _check_nodes(preset: str, nodes: int) -> None:
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
        raise MachineError(
            f"machine preset {preset!r}: nodes must be an integer >= 1, got {nodes!r}."
        )


def p100_machine(nodes: int = 1) -> Machine:
    """The paper's P100 cluster (§8.1): 4 P100 per node on NVLink, nodes on EDR InfiniBand."""
    _check_nodes("p100", nodes)
    m = _Builder(f"p100:{nodes}")
    ib = m.switch("ib_switch")
    for node in range(nodes):
        gpus = [m.device(f"n{node}.gpu{i}", "gpu", node, P100) for i in range(4)]
        nic = m.switch(f"n{node}.nic0")
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                m.duplex("nvlink", a, b, NVLINK1_BYTES_PER_S, NVLINK_LATENCY_S)
        for gpu in gpus:
            m.duplex("pcie", gpu, nic, PCIE3_X16_BYTES_PER_S, PCIE_LATENCY_S)
        m.duplex("infiniband", nic, ib, EDR_BYTES_PER_S, IB_LATENCY_S)
    return m.build()


def k80_machine(nodes: int = 1) -> Machine:
    """The paper's K80 cluster (§8.1): an asymmetric PCIe tree per node, 56 Gb/s FDR InfiniBand.

    GPUs 0,1 (one K80 board) sit behind PCIe switch 0, GPUs 2,3 behind switch 1; both switches and
    the NIC hang off the host bridge, so GPU 0 -> 1 is two PCIe hops while GPU 0 -> 2 also crosses
    the slower host bridge twice.
    """
    _check_nodes("k80", nodes)
    m = _Builder(f"k80:{nodes}")
    ib = m.switch("ib_switch")
    for node in range(nodes):
        gpus = [m.device(f"n{node}.gpu{i}", "gpu", node, K80_DIE) for i in range(4)]
        pcie_switches = [m.switch(f"n{node}.pcie_switch{s}") for s in range(2)]
        host = m.switch(f"n{node}.host")
        nic = m.switch(f"n{node}.nic0")
        for i, gpu in enumerate(gpus):
            m.duplex("pcie", gpu, pcie_switches[i // 2], PCIE3_X16_BYTES_PER_S, PCIE_LATENCY_S)
        for pcie_switch in pcie_switches:
            m.duplex(
                "host_bridge", pcie_switch, host, HOST_BRIDGE_BYTES_PER_S, HOST_BRIDGE_LATENCY_S
            )
        m.duplex("pcie", host, nic, NIC_PCIE_BYTES_PER_S, PCIE_LATENCY_S)
        m.duplex("infiniband", nic, ib, FDR_BYTES_PER_S, IB_LATENCY_S)
    return m.build()


def dgx_h100_machine(nodes: int = 1) -> Machine:
    """DGX H100 nodes: 8 H100 SXM on NVSwitch, a 400 Gb/s InfiniBand NIC per GPU, one IB switch."""
    return _dgx_hopper("dgx-h100", H100_SXM, nodes)


def dgx_h200_machine(nodes: int = 1) -> Machine:
    """DGX H200 nodes: the DGX H100's NVSwitch and NICs around 8 H200 SXM."""
    return _dgx_hopper("dgx-h200", H200_SXM, nodes)


def _dgx_hopper(preset: str, gpu_model: DeviceModel, nodes: int) -> Machine:
    """8 Hopper GPUs per node on NVSwitch (NVLink 4), a 400 Gb/s NIC per GPU, one IB switch."""
    _check_nodes(preset, nodes)
    m = _Builder(f"{preset}:{nodes}")
    ib = m.switch("ib_switch")
    for node in range(nodes):
        gpus = [m.device(f"n{node}.gpu{i}", "gpu", node, gpu_model) for i in range(8)]
        nvswitch = m.switch(f"n{node}.nvswitch")
        for gpu in gpus:
            m.duplex("nvswitch", gpu, nvswitch, NVLINK4_BYTES_PER_S, NVSWITCH_LATENCY_S)
        for i, gpu in enumerate(gpus):
            nic = m.switch(f"n{node}.nic{i}")
            m.duplex("pcie", gpu, nic, PCIE5_X16_BYTES_PER_S, PCIE_LATENCY_S)
            m.duplex("infiniband", nic, ib, NDR_BYTES_PER_S, IB_LATENCY_S)
    return m.build()


# ---- local: what Legate gives this run -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LegateProcessors:
    """Processors per node named by LEGATE_CONFIG (`--cpus N`, `--gpus N`, `--nodes N`)."""

    cpus: int
    gpus: int
    nodes: int


def parse_legate_config(config: str | None, default_cpus: int) -> LegateProcessors:
    """Read `--cpus/--gpus/--nodes` (also `--cpus=N`) from LEGATE_CONFIG without starting Legate."""
    values = {"--cpus": default_cpus, "--gpus": 0, "--nodes": 1}
    try:
        tokens = shlex.split(config or "")
    except ValueError as exc:
        raise MachineError(
            f"LEGATE_CONFIG {config!r} cannot be split into flags ({exc}); fix its quoting."
        ) from None
    position = 0
    while position < len(tokens):
        flag, equals, text = tokens[position].partition("=")
        position += 1
        if flag not in values:
            continue
        if not equals:
            if position == len(tokens):
                raise MachineError(
                    f"LEGATE_CONFIG {config!r}: {flag} has no value; write e.g. '{flag} 2'."
                )
            text = tokens[position]
            position += 1
        if not (text.isascii() and text.isdigit()):
            raise MachineError(
                f"LEGATE_CONFIG {config!r}: {flag} must be a non-negative integer, got {text!r}; "
                f"write e.g. '{flag} 2'."
            )
        values[flag] = int(text)
    found = LegateProcessors(values["--cpus"], values["--gpus"], values["--nodes"])
    if found.nodes < 1 or found.cpus + found.gpus < 1:
        raise MachineError(
            f"LEGATE_CONFIG {config!r} gives {found.cpus} CPUs and {found.gpus} GPUs on "
            f"{found.nodes} node(s); Legate needs at least one processor on at least one node."
        )
    return found


@dataclass(frozen=True, slots=True)
class LegateRanks:
    """The ranks of a multi-rank Legate run and how many of them share each host.

    Legate (Realm) counts every rank as a node with its own `--cpus/--gpus`, so `local` has one
    node per rank; ranks on one host exchange data through shared memory, ranks on different
    hosts through the network."""

    ranks: int
    ranks_per_host: int

    def __post_init__(self) -> None:
        if self.ranks < 1 or not 1 <= self.ranks_per_host <= self.ranks:
            raise MachineError(
                f"{self!r}: need ranks >= 1 and 1 <= ranks_per_host <= ranks; check the "
                "launcher's rank variables."
            )

    @property
    def hosts(self) -> int:
        return -(-self.ranks // self.ranks_per_host)

    def host_of(self, rank: int) -> int:
        """Launchers place ranks on hosts in blocks (mpirun -ppn, --npernode, srun)."""
        return rank // self.ranks_per_host


# What each launcher sets in every rank's environment: the run's rank count, then the count on
# this rank's host. `legate --launcher mpirun|srun` passes them through; Legate itself reads only
# the first, third and fourth of RANK_COUNT_VARS (25.11), so under MPICH's Hydra, which sets
# PMI_SIZE, a run needs MV2_COMM_WORLD_SIZE too (see tests/runtime/test_multirank.py).
RANK_COUNT_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS")
HOST_RANK_COUNT_VARS = (
    "OMPI_COMM_WORLD_LOCAL_SIZE",  # Open MPI
    "MPI_LOCALNRANKS",  # MPICH's Hydra
    "MV2_COMM_WORLD_LOCAL_SIZE",  # MVAPICH
    "SLURM_NTASKS_PER_NODE",  # srun --ntasks-per-node (legate's srun launcher passes it), "2(x3)"
)
# Legate's peer-to-peer bootstrap (legate.dask): every rank's "ip:port", space-separated.
PEERS_VAR, SELF_VAR = "WORKER_PEERS_INFO", "WORKER_SELF_INFO"


def _count(environ: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        text = environ.get(name)
        if text is None:
            continue
        digits = text.split("(", 1)[0].strip()  # SLURM_NTASKS_PER_NODE may read "2(x3)"
        if not (digits.isascii() and digits.isdigit()) or int(digits) < 1:
            raise MachineError(
                f"{name}={text!r} is not a rank count >= 1; unset it or fix the launcher."
            )
        return int(digits)
    return None


def launcher_ranks(environ: Mapping[str, str] | None = None) -> LegateRanks:
    """The ranks the launcher started (1 rank on 1 host outside a launcher), from the variables
    it sets in each rank; hosts are assumed to hold equal blocks of ranks."""
    env = os.environ if environ is None else environ
    peers = env.get(PEERS_VAR, "").split()
    if peers:
        host = env.get(SELF_VAR, peers[0]).rpartition(":")[0]
        on_host = sum(peer.rpartition(":")[0] == host for peer in peers)
        return LegateRanks(len(peers), max(on_host, 1))
    ranks = _count(env, RANK_COUNT_VARS) or 1
    per_host = min(_count(env, HOST_RANK_COUNT_VARS) or 1, ranks)
    return LegateRanks(ranks, per_host)


def host_memory_bytes() -> int:
    """Physical memory of this host: sysconf, else /proc/meminfo, else a 16 GiB guess."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return DEFAULT_HOST_MEMORY_BYTES


def local_machine(
    legate_config: str | None = None,
    *,
    host_cpus: int | None = None,
    memory_bytes: int | None = None,
    ranks: LegateRanks | None = None,
) -> Machine:
    """The processors Legate gives this run: one node per rank (`ranks`, else the launcher's
    variables; `--nodes N` in LEGATE_CONFIG plans N single-rank hosts without a launcher), each
    with LEGATE_CONFIG's processors (else this host's cores).

    CPU cores share memory: one `memory` link per direction per core pair. GPUs (H100 SXM
    constants, since nothing here can know the real model without a driver) share an NVSwitch and
    reach the host over PCIe 5.0. Ranks on one host meet in a shared-memory switch (`memory`
    links: UCX copies through shared memory); hosts are joined like p100's nodes, a NIC per
    rank and EDR InfiniBand, so data between hosts crosses more and slower links.
    """
    config = os.environ.get("LEGATE_CONFIG") if legate_config is None else legate_config
    procs = parse_legate_config(config, host_cpus or os.cpu_count() or 1)
    if ranks is None:
        ranks = launcher_ranks()
        if ranks.ranks == 1:
            ranks = LegateRanks(procs.nodes, 1)
    memory = memory_bytes or host_memory_bytes()
    cpu = DeviceModel(
        "CPU core",
        CPU_CORE_PEAK_FLOPS,
        CPU_CORE_MEMORY_BYTES_PER_S,
        max(1, memory // max(procs.cpus * ranks.ranks_per_host, 1)),
    )
    m = _Builder("local")
    networked = ranks.hosts > 1
    ib = m.switch("ib_switch") if networked else None
    shared = {
        host: m.switch(f"h{host}.shm")
        for host in range(ranks.hosts)
        if ranks.ranks_per_host > 1 and ranks.ranks - host * ranks.ranks_per_host > 1
    }
    for node in range(ranks.ranks):
        cpus = [m.device(f"n{node}.cpu{i}", "cpu", node, cpu) for i in range(procs.cpus)]
        gpus = [m.device(f"n{node}.gpu{i}", "gpu", node, H100_SXM) for i in range(procs.gpus)]
        for i, a in enumerate(cpus):
            for b in cpus[i + 1 :]:
                m.duplex("memory", a, b, MEMORY_LINK_BYTES_PER_S, MEMORY_LINK_LATENCY_S)
        if gpus or ranks.ranks > 1:
            host = m.switch(f"n{node}.host")
            for core in cpus:
                m.duplex("memory", core, host, MEMORY_LINK_BYTES_PER_S, MEMORY_LINK_LATENCY_S)
            for gpu in gpus:
                m.duplex("pcie", gpu, host, PCIE5_X16_BYTES_PER_S, PCIE_LATENCY_S)
        if len(gpus) > 1:
            nvswitch = m.switch(f"n{node}.nvswitch")
            for gpu in gpus:
                m.duplex("nvswitch", gpu, nvswitch, NVLINK4_BYTES_PER_S, NVSWITCH_LATENCY_S)
        if ranks.host_of(node) in shared:
            shm = shared[ranks.host_of(node)]
            m.duplex("memory", host, shm, MEMORY_LINK_BYTES_PER_S, MEMORY_LINK_LATENCY_S)
        if networked:
            nic = m.switch(f"n{node}.nic0")
            m.duplex("pcie", host, nic, NIC_PCIE_BYTES_PER_S, PCIE_LATENCY_S)
            m.duplex("infiniband", nic, ib, EDR_BYTES_PER_S, IB_LATENCY_S)
    return m.build()


# ---- the table parse_machine reads --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    build: Callable[[int], Machine]
    description: str


NODE_PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "p100", p100_machine, "paper §8.1: 4 x P100 per node, NVLink, 100 Gb/s EDR InfiniBand"
        ),
        Preset(
            "k80", k80_machine, "paper §8.1: 4 x K80 die per node, asymmetric PCIe, 56 Gb/s FDR"
        ),
        Preset("dgx-h100", dgx_h100_machine, "8 x H100 SXM per node, NVSwitch, 8 x 400 Gb/s NDR"),
        Preset("dgx-h200", dgx_h200_machine, "8 x H200 SXM per node, NVSwitch, 8 x 400 Gb/s NDR"),
    )
}
LOCAL_DESCRIPTION = (
    "the processors LEGATE_CONFIG gives each rank (default: this host's cores), a node per rank"
)
PRESET_HELP = ", ".join(f"{name}:N" for name in NODE_PRESETS) + " (N nodes >= 1), local"
PRESET_EXAMPLES = tuple(f"{name}:1" for name in NODE_PRESETS) + ("local",)
