"""The machine of the paper (§5, device topology D): devices, the links between them, routes.

A `Machine` is an immutable description, never a handle on real hardware: the simulator prices
tasks on its devices and transfers on its links, only `flexflow.runtime` maps it onto Legate.

Links are directed: a full-duplex connection is two `Link`s, so opposite transfers never queue
behind each other. Endpoints that compute nothing (NVSwitch, PCIe switches, the host bridge, NICs,
the InfiniBand switch) are `switches`. A transfer goes from its source device through switches to
its destination device, never through a third device. `route` picks the path with the fewest
hops, then the largest bottleneck bandwidth, then the smallest link ids (compared hop by hop from
the source), so every run of the simulator sees the same paths.

Presets (`p100:N`, `k80:N`, `dgx-h100:N`, `local`) live in `flexflow.machine_presets`;
`parse_machine` resolves a preset name or a machine file.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from flexflow.errors import MachineError, shown
from flexflow.fileio import DuplicateKeyError, atomic_write_text, read_text, unique_keys

MACHINE_FORMAT = "flexflow-machine"
MACHINE_VERSION = 1

DEVICE_KINDS = ("cpu", "gpu")
LINK_KINDS = (
    "nvlink",  # GPU <-> GPU NVLink
    "nvswitch",  # GPU <-> NVSwitch fabric
    "pcie",  # a PCIe link (device <-> PCIe switch, host bridge or NIC)
    "host_bridge",  # PCIe switch <-> CPU root complex
    "qpi",  # socket <-> socket (QPI / UPI)
    "nic",  # inside a network adapter
    "infiniband",  # NIC <-> InfiniBand switch
    "ethernet",  # NIC <-> Ethernet switch
    "memory",  # CPU <-> CPU through shared memory
)


def _is_number(value: Any) -> bool:
    """A finite int or float (an int past float's range, 1 and 400 zeros, is not)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# Field rules: (test, what the field must be, normalize). One table serves Device and Link.
_INDEX = (
    lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "a non-negative integer",
    None,
)
_TEXT = (lambda v: isinstance(v, str) and v != "", "a non-empty string", None)


def _within(low: float, high: float, unit: str) -> tuple:
    """A rule for a number in [low, high]: bounds far outside any hardware, so every time the
    simulator derives stays finite (a bandwidth of 1e-300 B/s or a latency of 1e308 s made
    iteration times infinite and stopped searches)."""

    def test(v: Any) -> bool:
        return _is_number(v) and low <= v <= high

    return (test, f"a number at least {low:g} and at most {high:g} {unit}", float)


_FLOPS = _within(1e3, 1e21, "FLOP/s")
_BYTES_PER_S = _within(1.0, 1e18, "bytes/s")
_LATENCY = _within(0.0, 1e3, "seconds")
_WHOLE = (
    lambda v: _is_number(v) and v > 0 and float(v).is_integer(),
    "a positive whole number",
    int,
)


def _one_of(kinds: tuple[str, ...]) -> tuple:
    return (lambda v: v in kinds, f"one of {', '.join(kinds)}", None)


def _validate(value: Any, label: str, rules: dict[str, tuple]) -> None:
    """Check each field of a frozen value against its rule, normalize numbers, name all problems."""
    problems = []
    for key, (test, expected, _) in rules.items():
        if not test(getattr(value, key)):
            problems.append(f"{key} must be {expected}, got {shown(getattr(value, key))}")
    if problems:
        raise MachineError(f"{label}: {'; '.join(problems)}; fix its description.")
    for key, (_, _, normalize) in rules.items():
        if normalize is not None:
            object.__setattr__(value, key, normalize(getattr(value, key)))


@dataclass(frozen=True, slots=True)
class Device:
    """A compute device: one GPU, or one CPU core Legate runs tasks on."""

    id: int
    name: str  # "n0.gpu1"
    kind: str  # "gpu" or "cpu"
    model: str  # "Tesla P100-SXM2"
    node: int
    peak_flops: float  # FP32 FLOP/s
    memory_bandwidth_bytes_per_s: float
    memory_bytes: int

    def __post_init__(self) -> None:
        _validate(self, f"device {self.id!r} {self.name!r}", _DEVICE_RULES)


_DEVICE_RULES = {
    "id": _INDEX,
    "name": _TEXT,
    "kind": _one_of(DEVICE_KINDS),
    "model": _TEXT,
    "node": _INDEX,
    "peak_flops": _FLOPS,
    "memory_bandwidth_bytes_per_s": _BYTES_PER_S,
    "memory_bytes": _WHOLE,
}


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a physical connection; a full-duplex connection is two Links."""

    id: int
    name: str  # "n0.nvlink.gpu0->gpu1"
    kind: str  # one of LINK_KINDS
    src: str  # endpoint name: a device or a switch
    dst: str
    bandwidth_bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        _validate(self, f"link {self.id!r} {self.name!r}", _LINK_RULES)
        if self.src == self.dst:
            raise MachineError(
                f"link {self.id!r} {self.name!r}: src and dst are both {self.src!r}; "
                "a link joins two different endpoints; fix its description."
            )

    def transfer_s(self, size_bytes: float) -> float:
        """Time to move `size_bytes` over this link alone: latency plus size / bandwidth (A2)."""
        return self.latency_s + size_bytes / self.bandwidth_bytes_per_s


_LINK_RULES = {
    "id": _INDEX,
    "name": _TEXT,
    "kind": _one_of(LINK_KINDS),
    "src": _TEXT,
    "dst": _TEXT,
    "bandwidth_bytes_per_s": _BYTES_PER_S,
    "latency_s": _LATENCY,
}


@dataclass(frozen=True)
class Machine:
    """The device topology D: devices, switches and directed links, validated when built."""

    name: str
    devices: tuple[Device, ...]
    switches: tuple[str, ...]
    links: tuple[Link, ...]

    def __post_init__(self) -> None:
        for key in ("devices", "switches", "links"):
            if isinstance(getattr(self, key), list):
                object.__setattr__(self, key, tuple(getattr(self, key)))
        problems = _structure_problems(self)
        if not problems:  # routes can only be searched once every endpoint is known
            problems = _connectivity_problems(self)
        if problems:
            numbered = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
            raise MachineError(
                f"machine {self.name!r} is invalid, {len(problems)} problem(s): {numbered}; "
                "fix the machine description (`flexflow machines --json` prints valid examples)."
            )

    # ---- devices ---------------------------------------------------------------------------

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def kind_ordinals(self) -> tuple[tuple[str, int], ...]:
        """For each device id, its kind and its index among the devices of that kind: the
        Legate processor a strategy's device runs on (device 3 of a 2-CPU, 4-GPU node is
        ("gpu", 1))."""
        seen: dict[str, int] = {}
        ordinals = []
        for device in self.devices:
            ordinals.append((device.kind, seen.get(device.kind, 0)))
            seen[device.kind] = ordinals[-1][1] + 1
        return tuple(ordinals)

    @cached_property
    def num_nodes(self) -> int:
        return len({d.node for d in self.devices})

    def device(self, device_id: int) -> Device:
        if isinstance(device_id, int) and 0 <= device_id < len(self.devices):
            return self.devices[device_id]
        last = len(self.devices) - 1
        raise MachineError(
            f"machine {self.name!r} has no device {device_id!r} "
            f"(devices 0-{last}); use a device id from 0 to {last}."
        )

    def most_cpus_on_a_node(self) -> int:
        """The most CPU devices one node has (0 without CPUs): the processors that can run at
        once in one process, as the profiler and the simulator's runtime cost count them."""
        counts = Counter(d.node for d in self.devices if d.kind == "cpu")
        return max(counts.values(), default=0)

    def devices_on_node(self, node: int) -> tuple[Device, ...]:
        found = tuple(d for d in self.devices if d.node == node)
        if not found:
            raise MachineError(
                f"machine {self.name!r} has no node {node!r} (nodes 0-{self.num_nodes - 1}); "
                f"use a node from 0 to {self.num_nodes - 1}."
            )
        return found

    # ---- routes ----------------------------------------------------------------------------

    def route(self, src_device_id: int, dst_device_id: int) -> tuple[Link, ...]:
        """The links a transfer from one device to another crosses, in order; () for src == dst."""
        src, dst = self.device(src_device_id), self.device(dst_device_id)
        if src.id == dst.id:
            return ()
        routes = self._route_cache.get(src.id)
        if routes is None:
            routes = self._route_cache[src.id] = _routes_from(self, src.id)
        return routes[dst.id]

    def transfer_s(self, src_device_id: int, dst_device_id: int, size_bytes: float) -> float:
        """Uncontended time to move `size_bytes` along `route`: latencies plus size / bottleneck."""
        path = self.route(src_device_id, dst_device_id)
        if not path:
            return 0.0
        bottleneck = min(link.bandwidth_bytes_per_s for link in path)
        return sum(link.latency_s for link in path) + size_bytes / bottleneck

    @cached_property
    def _route_cache(self) -> dict[int, tuple[tuple[Link, ...], ...]]:
        return {}  # source device id -> route to every device, filled one source at a time

    @cached_property
    def _links_out(self) -> dict[str, tuple[Link, ...]]:
        out: dict[str, list[Link]] = {name: [] for name in self.endpoint_names}
        for link in self.links:
            out[link.src].append(link)
        return {name: tuple(links) for name, links in out.items()}

    @property
    def endpoint_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices) + self.switches

    # ---- files -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MACHINE_FORMAT,
            "version": MACHINE_VERSION,
            "name": self.name,
            "devices": [{key: getattr(d, key) for key in _DEVICE_RULES} for d in self.devices],
            "switches": list(self.switches),
            "links": [{key: getattr(link, key) for key in _LINK_RULES} for link in self.links],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    def save(self, path: str | os.PathLike[str]) -> Path:
        return atomic_write_text(path, self.dumps() + "\n")

    @classmethod
    def from_json(cls, data: Any, source: str = "machine JSON") -> Machine:
        """Rebuild a machine from `to_json` output; one MachineError names every problem found."""
        return _machine_from_json(data, source)

    @classmethod
    def loads(cls, text: str, source: str = "machine JSON") -> Machine:
        try:
            data = json.loads(text, object_pairs_hook=unique_keys)
        except DuplicateKeyError as exc:
            raise MachineError(
                f"{source} gives {exc.key!r} twice in one object (JSON readers keep either "
                "value); keep one."
            ) from None
        except RecursionError:
            raise MachineError(f"{source}: its JSON nests too deeply to be one.") from None
        except json.JSONDecodeError as exc:
            if not text.strip():
                raise MachineError(
                    f"{source} is empty; a machine file is a JSON object in the "
                    f"{MACHINE_FORMAT!r} format (`flexflow machines --json` prints examples)."
                ) from None
            if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
                raise MachineError(
                    f"{source}: the JSON is truncated (it ends at line {exc.lineno} column "
                    f"{exc.colno} inside a value); write the whole file again."
                ) from None
            raise MachineError(
                f"{source}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
                f"a machine file is a JSON object in the {MACHINE_FORMAT!r} format."
            ) from None
        return cls.from_json(data, source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Machine:
        text = read_text(path, "machine file", MachineError)
        return cls.loads(text, f"machine file {str(path)!r}")

    # ---- text ------------------------------------------------------------------------------

    def describe(self) -> str:
        """A few lines: devices by model, links by kind and speed."""
        lines = [
            f"machine {self.name}: {self.num_devices} devices on {self.num_nodes} node(s), "
            f"{len(self.switches)} switches, {len(self.links)} links"
        ]
        for (kind, model), count in Counter((d.kind, d.model) for d in self.devices).items():
            d = next(d for d in self.devices if (d.kind, d.model) == (kind, model))
            lines.append(
                f"  {count} x {kind} {model}: {d.peak_flops / 1e12:.3g} TFLOP/s FP32, "
                f"{d.memory_bandwidth_bytes_per_s / 1e9:.4g} GB/s, {d.memory_bytes / 2**30:.3g} GiB"
            )
        for (kind, bandwidth, latency), count in link_groups(self.links).items():
            lines.append(
                f"  {count} x {kind} link: {bandwidth / 1e9:.4g} GB/s per direction, "
                f"{latency * 1e6:.3g} us"
            )
        return "\n".join(lines)


def link_groups(links: Iterable[Link]) -> dict[tuple[str, float, float], int]:
    """Link counts by (kind, bandwidth, latency), in order of first appearance."""
    return dict(Counter((link.kind, link.bandwidth_bytes_per_s, link.latency_s) for link in links))


# ---- validation ------------------------------------------------------------------------------


def _duplicates(names: Iterable[str]) -> list[str]:
    return sorted(name for name, count in Counter(names).items() if count > 1)


MAX_DEVICES = 1024
"""The most devices a machine may have: the simulator keeps a route for every pair of devices
(p100:256, 1,024 GPUs, simulates LeNet in about 11 s and 730 MB; 4,096 GPUs needed more than
6 GB and minutes before its first task)."""


def _too_many(devices: int, at_least: bool = False) -> str:
    return (
        f"it has {devices:,}{' or more' if at_least else ''} devices; flexflow simulates machines of at most {MAX_DEVICES:,} "
        "(it keeps a route for every pair of devices): plan on a slice of the cluster, whose "
        "strategy repeats across the rest under data parallelism"
    )


def _structure_problems(machine: Machine) -> list[str]:
    problems: list[str] = []
    if not isinstance(machine.name, str) or not machine.name:
        problems.append(f"name must be a non-empty string, got {machine.name!r}")
    for key, cls in (("devices", Device), ("switches", str), ("links", Link)):
        values = getattr(machine, key)
        if not isinstance(values, tuple) or not all(isinstance(v, cls) for v in values):
            problems.append(f"{key} must be a tuple of {cls.__name__}, got {values!r:.80}")
    if problems:
        return problems
    if not machine.devices:
        problems.append("it has no devices; add at least one")
    if len(machine.devices) > MAX_DEVICES:
        return [_too_many(len(machine.devices))]
    for position, device in enumerate(machine.devices):
        if device.id != position:
            problems.append(f"device {device.name!r} at position {position} has id {device.id}")
    for position, link in enumerate(machine.links):
        if link.id != position:
            problems.append(f"link {link.name!r} at position {position} has id {link.id}")
    nodes = sorted({d.node for d in machine.devices})
    if nodes != list(range(len(nodes))):
        problems.append(f"device nodes must be numbered 0-{len(nodes) - 1}, got {nodes}")
    for name in _duplicates(machine.endpoint_names):
        problems.append(f"the name {name!r} is used by more than one device or switch")
    for name in _duplicates(link.name for link in machine.links):
        problems.append(f"the link name {name!r} is used more than once")
    problems += _model_problems(machine.devices)
    endpoints = set(machine.endpoint_names)
    for link in machine.links:
        for end in ("src", "dst"):
            if getattr(link, end) not in endpoints:
                problems.append(
                    f"link {link.id} {link.name!r} has unknown {end} {getattr(link, end)!r} "
                    "(neither a device nor a switch)"
                )
    return problems


_MODEL_SPECS = ("kind", "peak_flops", "memory_bandwidth_bytes_per_s")
"""What devices of one model share: tasks are priced, and profiles measured, per model."""


def _model_problems(devices: Iterable[Device]) -> list[str]:
    """Devices of one model name whose kind or speeds differ (each run priced them all as
    the first one the cost model met: results depended on the devices' order)."""
    first: dict[str, Device] = {}
    problems = []
    for device in devices:
        seen = first.setdefault(device.model, device)
        differ = [spec for spec in _MODEL_SPECS if getattr(device, spec) != getattr(seen, spec)]
        if differ:
            problems.append(
                f"devices {seen.name!r} and {device.name!r} are both model {device.model!r} "
                f"but differ in {', '.join(differ)}; a model names one kind of device (tasks "
                "are priced and profiled per model): give them different model names"
            )
            first[device.model] = device  # one problem per pair of differing groups
    return problems


def _connectivity_problems(machine: Machine) -> list[str]:
    """Every device must reach every other one through switches only."""
    devices = {d.name for d in machine.devices}
    out = machine._links_out
    problems = []
    for device in machine.devices:
        seen = {device.name}
        frontier = [device.name]
        while frontier:
            step = []
            for name in frontier:
                for link in out[name]:
                    if link.dst not in seen:
                        seen.add(link.dst)
                        if link.dst not in devices:
                            step.append(link.dst)
            frontier = step
        missing = [d.name for d in machine.devices if d.name not in seen]
        if missing:
            unreached = ", ".join(missing[:4]) + (
                f" and {len(missing) - 4} more" if len(missing) > 4 else ""
            )
            problems.append(
                f"device {device.name!r} has no route to {unreached} (a transfer passes through "
                "switches only, never through another device: link them directly or through "
                "a switch)"
            )
    return problems


# ---- routing ---------------------------------------------------------------------------------


def _routes_from(machine: Machine, src_id: int) -> tuple[tuple[Link, ...], ...]:
    """The route from one device to every device (index = destination id), in one search.

    Breadth-first layers give the fewest hops. Each endpoint keeps the paths of its layer
    that no other beats on both counts (a bottleneck at least as wide and smaller link ids,
    compared hop by hop): the best route's first hops are such a path to the endpoint before
    it, since a path beating them would make a better route. The route to a device is then
    its widest kept path, ties going to the smallest link ids, exactly. An endpoint keeps a
    path per bottleneck at most (one or two on the presets), so a search costs the links a
    few times over, not once per distinct bandwidth of the machine (a 1,024-GPU star whose
    links all differ took 144 s to route).
    """
    out = machine._links_out
    devices = {d.name for d in machine.devices}
    src = machine.devices[src_id].name
    best: dict[str, list[tuple[float, tuple[int, ...]]]] = {src: [(math.inf, ())]}
    frontier = [src]
    while frontier:
        layer: dict[str, list[tuple[float, tuple[int, ...]]]] = {}
        for name in frontier:
            for link in out[name]:
                if link.dst in best:
                    continue
                reached = layer.setdefault(link.dst, [])
                for bottleneck, path in best[name]:
                    reached.append((min(bottleneck, link.bandwidth_bytes_per_s), (*path, link.id)))
        for name, paths in layer.items():
            layer[name] = _unbeaten(paths)
        best.update(layer)
        frontier = [name for name in layer if name not in devices]
    routes = []
    for device in machine.devices:
        ids = () if device.name == src else best[device.name][0][1]
        routes.append(tuple(machine.links[i] for i in ids))
    return tuple(routes)


def _unbeaten(
    paths: list[tuple[float, tuple[int, ...]]],
) -> list[tuple[float, tuple[int, ...]]]:
    """The (bottleneck, link ids) paths no other beats on both counts, widest first (the first
    is the route: the widest, the smallest ids among those)."""
    kept: list[tuple[float, tuple[int, ...]]] = []
    for bottleneck, path in sorted(paths, key=lambda entry: (-entry[0], entry[1])):
        if not kept or path < kept[-1][1]:
            kept.append((bottleneck, path))
    return kept


# ---- JSON ------------------------------------------------------------------------------------


def _entry(cls: type, label: str, raw: Any, rules: dict[str, tuple], problems: list[str]) -> Any:
    """Build one Device or Link from its JSON entry, or return None after noting its problems."""
    if not isinstance(raw, dict):
        problems.append(f"{label} must be a JSON object, got {raw!r:.60}")
        return None
    missing = [key for key in rules if key not in raw]
    unknown = [key for key in raw if key not in rules]
    problems += [f"{label} is missing field {key!r}" for key in missing]
    problems += [
        f"{label} has unknown field {key!r} (fields: {', '.join(rules)})" for key in unknown
    ]
    if missing or unknown:
        return None
    try:
        return cls(**raw)
    except MachineError as exc:
        problems.append(str(exc).removesuffix("; fix its description."))
        return None


def _machine_from_json(data: Any, source: str) -> Machine:
    def fail(problems: list[str]) -> MachineError:
        numbered = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        return MachineError(
            f"{source} is invalid, {len(problems)} problem(s): {numbered}; fix the file "
            "(`flexflow machines --json` prints valid examples)."
        )

    machines = isinstance(data, list) and data and all(isinstance(m, dict) for m in data)
    if machines and len(data) == 1:  # `flexflow machines --json NAME > FILE`
        data = data[0]
    elif machines:
        raise fail([
            f"it holds a list of {len(data)} machines (as `flexflow machines --json` prints "
            "them); keep the one you mean, as one JSON object or a list of one"
        ])  # fmt: skip
    if not isinstance(data, dict):
        raise fail([f"expected a JSON object, got {type(data).__name__}"])
    if data.get("format") != MACHINE_FORMAT:
        raise fail([f"format is {data.get('format')!r}, expected {MACHINE_FORMAT!r}"])
    if data.get("version") != MACHINE_VERSION:
        version = data.get("version")
        raise fail(
            [f"version {version!r} is not supported (this flexflow reads {MACHINE_VERSION})"]
        )
    problems: list[str] = []
    expected = {"format", "version", "name", "devices", "switches", "links"}
    problems += [f"missing field {key!r}" for key in sorted(expected - data.keys())]
    problems += [f"unknown field {key!r}" for key in sorted(data.keys() - expected)]
    if "name" in data and (not isinstance(data["name"], str) or not data["name"]):
        problems.append(f"field 'name' must be a non-empty string, got {data['name']!r:.60}")
    for key in ("devices", "switches", "links"):
        if key in data and not isinstance(data[key], list):
            problems.append(f"field {key!r} must be a JSON list, got {data[key]!r:.60}")
    if problems:
        raise fail(problems)
    for i, switch in enumerate(data["switches"]):
        if not isinstance(switch, str) or not switch:
            problems.append(f"switch {i} must be a non-empty string, got {switch!r:.60}")
    devices = [
        _entry(Device, f"device {i}", raw, _DEVICE_RULES, problems)
        for i, raw in enumerate(data["devices"])
    ]
    links = [
        _entry(Link, f"link {i}", raw, _LINK_RULES, problems) for i, raw in enumerate(data["links"])
    ]
    if problems:
        raise fail(problems)
    try:
        return Machine(data["name"], tuple(devices), tuple(data["switches"]), tuple(links))
    except MachineError as exc:
        raise MachineError(f"{source}: {exc}") from None


def parse_machine(spec: str) -> Machine:
    """A preset (`p100:N`, `k80:N`, `dgx-h100:N`, `dgx-h200:N`, `local`) or a machine JSON file."""
    from flexflow.machine_presets import NODE_PRESETS, PRESET_HELP, local_machine

    name, colon, count = spec.partition(":")
    if spec == "local":
        return local_machine()
    if name in NODE_PRESETS and colon:
        if not (count.isascii() and count.isdigit()) or int(count) < 1:
            raise MachineError(
                f"machine {spec!r}: the node count must be an integer >= 1, got {count!r}; "
                f"write e.g. '{name}:2'."
            )
        if int(count) > MAX_DEVICES:  # every node has a device: too many, before building
            raise MachineError(f"machine {spec!r}: {_too_many(int(count), at_least=True)}.")
        return NODE_PRESETS[name].build(int(count))
    if Path(spec).exists():
        return Machine.load(spec)
    if name in NODE_PRESETS:
        raise MachineError(f"machine {spec!r} needs a node count; write '{name}:1' for one node.")
    raise MachineError(
        f"unknown machine {spec!r} (no preset of that name and no such file); "
        f"use one of {PRESET_HELP} or the path of a machine JSON file."
    )
