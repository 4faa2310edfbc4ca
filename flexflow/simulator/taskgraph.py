"""The task graph of one training iteration (paper §5.1, Table 2), built from (operator graph, machine, strategy).

Tasks and what they model:
- compute: a forward and a backward task per task of each op's configuration, on its device,
  timed by the cost model. Backward depends on its own forward (it needs the activations).
- communication: for every tensor edge, every producer tile that overlaps a consumer tile's
  input region gives a dependency when both are on one device, else a transfer of the overlap
  (and, for float tensors, the reverse transfer of its gradient in the backward pass). A
  transfer is ONE task that occupies every link of its route at once (cut-through, as NVLink,
  PCIe and InfiniBand forward data), for latency + bytes / bottleneck bandwidth; so transfers
  sharing any link of their routes queue behind each other.
- parameter synchronization: the tasks of all ops using a parameter are grouped by the weight
  region they read; each group whose region lives on several devices all-reduces its gradient
  around a ring of those devices (2(r-1)/r of the region's bytes over each ring hop, so the
  bytes moved are the 2(r-1) x size of data parallelism), then every holder updates its copy.
  Groups on one device just update. Zero-time barrier tasks join the group's backward tasks to
  the ring and the ring to the updates.
- batch norm split in the sample dimension adds the all-reduce of its per-channel statistics
  to each forward and backward task's time (a few KB: latency-bound), not as separate tasks.

Model inputs are assumed resident wherever their consumers run (data loading is not modeled).

The graph is kept in blocks (an op's compute tasks, an edge's transfers, a parameter's sync) so
that changing one op's configuration rebuilds only the blocks that op touches: that is what
delta simulation (Algorithm 2) updates. Every task has a canonical `key` independent of build
order, used to break ties between tasks ready at the same time on one device, so a graph
updated by deltas and a graph built afresh schedule identically.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable

from flexflow.graph import OpNode
from flexflow.ops.base import Region, region_volume
from flexflow.simulator.context import SimContext
from flexflow.strategy import ParallelConfig, Strategy

COMPUTE, COMM, UPDATE, BARRIER = "compute", "comm", "update", "barrier"
FORWARD, BACKWARD = 0, 1

Block = tuple  # ("op", i) | ("edge", consumer, input index) | ("sync", parameter id)

# Canonical task keys, packed in one integer: kind, then up to four small fields.
FWD_KEY, BWD_KEY, XFER_KEY, GRAD_XFER_KEY, GATHER_KEY, RING_KEY, REDUCED_KEY, UPDATE_KEY = range(8)
_FIELD_BITS = (20, 14, 14, 14)
DEVICE_TASK = (
    1 << 68
)  # above every key (3 kind bits + 62 field bits): tasks holding a device or link


def task_key(kind: int, *fields: int) -> int:
    """Pack (kind, a, b, c, d) into an int whose order is the tuple's order (fields >= 0)."""
    key = kind
    for bits, value in itertools.zip_longest(_FIELD_BITS, fields, fillvalue=0):
        if not 0 <= value < 1 << bits:
            raise AssertionError(f"task key field {value} out of range for {bits} bits")
        key = (key << bits) | value
    return key


def key_kind(key: int) -> int:
    return (key % DEVICE_TASK) >> sum(_FIELD_BITS)


class TaskGraph:
    """Tasks in parallel lists indexed by task id; ids of removed tasks are reused."""

    def __init__(self, context: SimContext, strategy: Strategy) -> None:
        self.context = context
        graph, machine = context.graph, context.machine
        self.graph, self.machine = graph, machine
        self.num_devices = machine.num_devices
        self.num_resources = machine.num_devices + len(machine.links)
        self.configs: list[ParallelConfig] = list(strategy.configs)
        # per task
        self.exe: list[float] = []
        self.res: list[tuple[int, ...]] = []  # devices (ids) and links (num_devices + link id)
        self.preds: list[list[int]] = []
        self.succs: list[list[int]] = []
        self.order: list[int] = []  # task_key, plus DEVICE_TASK if it holds a device or link
        self.kind: list[str] = []
        self.size_bytes: list[int] = []
        self.res_dst: list[int] = []  # destination device of a transfer, else -1
        self.name: list[str] = []
        self.live: list[bool] = []
        self._free: list[int] = []
        # structure
        self.blocks: dict[Block, list[int]] = {}
        self.fwd: list[list[int]] = [[] for _ in graph.ops]
        self.bwd: list[list[int]] = [[] for _ in graph.ops]
        self._users: dict[int, list[int]] = defaultdict(list)  # parameter -> ops using it
        for node in graph.ops:
            for pid in dict.fromkeys(node.weights):
                self._users[pid].append(node.id)
        self._consumers: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for node in graph.ops:
            for j, tid in enumerate(node.inputs):
                producer = graph.tensor(tid).producer
                if producer is not None:
                    self._consumers[producer].append((node.id, j))
        for node in graph.ops:
            self._build_op(node)
        for node in graph.ops:
            for j in range(len(node.inputs)):
                self._build_edge(node, j)
        for pid in self._users:
            self._build_sync(pid)

    # ---- queries -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of task ids (including free ones)."""
        return len(self.exe)

    def live_tasks(self) -> Iterable[int]:
        return (t for t in range(len(self.exe)) if self.live[t])

    def resource_name(self, r: int) -> str:
        if r < self.num_devices:
            return self.machine.devices[r].name
        return self.machine.links[r - self.num_devices].name

    # ---- delta ---------------------------------------------------------------------------------
    def affected_blocks(self, op: int) -> list[Block]:
        node = self.graph.ops[op]
        blocks: list[Block] = [("op", op)]
        blocks += [("edge", op, j) for j in range(len(node.inputs))]
        blocks += [("edge", c, j) for c, j in self._consumers[op]]
        blocks += [("sync", pid) for pid in dict.fromkeys(node.weights)]
        return blocks

    def set_config(self, op: int, config: ParallelConfig) -> tuple[set[int], list[int]]:
        """Give `op` a new configuration, rebuilding only its blocks.

        Returns (neighbours: live tasks whose predecessors changed, added task ids).
        """
        self.configs[op] = config
        blocks = self.affected_blocks(op)
        touched: set[int] = set()
        for block in blocks:
            for t in self.blocks.pop(block, []):
                touched.update(self.succs[t])
                self._remove(t)
        self._build_op(self.graph.ops[op])
        for block in blocks[1:]:
            if block[0] == "edge":
                self._build_edge(self.graph.ops[block[1]], block[2])
            else:
                self._build_sync(block[1])
        added = [t for blk in blocks for t in self.blocks.get(blk, [])]
        return {t for t in touched if self.live[t]}, added

    # ---- building blocks -------------------------------------------------------------------------
    def _new(
        self,
        block: list[int],
        kind: str,
        res: tuple[int, ...],
        exe: float,
        key: int,
        name: str,
        size_bytes: int = 0,
        dst: int = -1,
    ) -> int:
        order = key + DEVICE_TASK if res else key
        if self._free:
            t = self._free.pop()
            self.exe[t], self.res[t], self.order[t], self.kind[t] = exe, res, order, kind
            self.name[t], self.size_bytes[t], self.live[t] = name, size_bytes, True
            self.res_dst[t] = dst
            self.preds[t], self.succs[t] = [], []
        else:
            t = len(self.exe)
            self.exe.append(exe)
            self.res.append(res)
            self.order.append(order)
            self.kind.append(kind)
            self.name.append(name)
            self.size_bytes.append(size_bytes)
            self.res_dst.append(dst)
            self.live.append(True)
            self.preds.append([])
            self.succs.append([])
        block.append(t)
        return t

    def _edge(self, a: int, b: int) -> None:
        self.succs[a].append(b)
        self.preds[b].append(a)

    def _remove(self, t: int) -> None:
        for p in self.preds[t]:
            if self.live[p]:
                self.succs[p].remove(t)
        for s in self.succs[t]:
            if self.live[s]:
                self.preds[s].remove(t)
        self.preds[t], self.succs[t] = [], []
        self.live[t] = False
        self._free.append(t)

    def _build_op(self, node: OpNode) -> None:
        block: list[int] = []
        self.blocks[("op", node.id)] = block
        config = self.configs[node.id]
        devices = self.machine.devices
        stats_s = self._statistics_s(node, config)
        fwd, bwd = [], []
        for k, device in enumerate(config.devices):
            time = self.context.task_time(node.id, config.degrees, devices[device])
            f = self._new(
                block,
                COMPUTE,
                (device,),
                time.forward_s + stats_s,
                task_key(FWD_KEY, node.id, k),
                f"{node.name}[{k}].fwd",
            )
            b = self._new(
                block,
                COMPUTE,
                (device,),
                time.backward_s + stats_s,
                task_key(BWD_KEY, node.id, k),
                f"{node.name}[{k}].bwd",
            )
            self._edge(f, b)
            fwd.append(f)
            bwd.append(b)
        self.fwd[node.id], self.bwd[node.id] = fwd, bwd

    def _statistics_s(self, node: OpNode, config: ParallelConfig) -> float:
        """Time of the statistics all-reduce a task of `node` waits for (0 for most ops)."""
        if not node.op.statistics_dims:
            return 0.0
        split = [
            degree
            for dim, degree in zip(node.sig.dims, config.degrees, strict=True)
            if dim.name in node.op.statistics_dims and degree > 1
        ]
        if not split:
            return 0.0
        ring = math.prod(split)
        region = self.context.regions(node.id, config.degrees)[0]
        size = 2 * (ring - 1) / ring * 4 * node.op.statistics_elements(node.sig, region)
        devices = sorted(set(config.devices))
        hops = zip(devices, devices[1:] + devices[:1], strict=True)
        worst = max((self.context.transfer(a, b, size)[1] for a, b in hops if a != b), default=0.0)
        return worst * (ring - 1)  # ring steps, each bounded by the slowest hop

    def _transfer(
        self, block: list[int], src: int, dst: int, size: int, key: int, name: str
    ) -> int:
        res, exe = self.context.transfer(src, dst, size)
        return self._new(block, COMM, res, exe, key, name, size, dst)

    def _build_edge(self, consumer: OpNode, j: int) -> None:
        block: list[int] = []
        self.blocks[("edge", consumer.id, j)] = block
        tensor = self.graph.tensor(consumer.inputs[j])
        if tensor.producer is None:
            return
        producer = self.graph.ops[tensor.producer]
        p_config, c_config = self.configs[producer.id], self.configs[consumer.id]
        itemsize = tensor.spec.dtype.itemsize
        grads = tensor.spec.dtype.is_float
        p_fwd, p_bwd = self.fwd[producer.id], self.bwd[producer.id]
        c_fwd, c_bwd = self.fwd[consumer.id], self.bwd[consumer.id]
        overlaps = self.context.overlaps(consumer.id, j, p_config.degrees, c_config.degrees)
        for kc, kp, volume in overlaps:
            p_dev, c_dev = p_config.devices[kp], c_config.devices[kc]
            if p_dev == c_dev:
                self._edge(p_fwd[kp], c_fwd[kc])
                self._edge(c_bwd[kc], p_bwd[kp])
                continue
            size = volume * itemsize
            label = f"{producer.name}[{kp}]->{consumer.name}[{kc}]"
            x = self._transfer(
                block, p_dev, c_dev, size, task_key(XFER_KEY, consumer.id, j, kc, kp), label
            )
            self._edge(p_fwd[kp], x)
            self._edge(x, c_fwd[kc])
            if grads:
                y = self._transfer(
                    block,
                    c_dev,
                    p_dev,
                    size,
                    task_key(GRAD_XFER_KEY, consumer.id, j, kc, kp),
                    f"grad {label}",
                )
                self._edge(c_bwd[kc], y)
                self._edge(y, p_bwd[kp])
            else:
                self._edge(c_bwd[kc], p_bwd[kp])

    def _sync_groups(self, pid: int) -> list[tuple[Region, list[int], list[int]]]:
        """The tasks using parameter `pid`, grouped by the weight region they read: (region, devices, backward tasks)."""
        groups: dict[Region, tuple[list[int], list[int]]] = {}
        for op in self._users[pid]:
            node, config = self.graph.ops[op], self.configs[op]
            w = node.weights.index(pid)
            for k, regions in enumerate(self.context.weight_regions(op, config.degrees)):
                devices, tasks = groups.setdefault(regions[w], ([], []))
                if config.devices[k] not in devices:
                    devices.append(config.devices[k])
                tasks.append(self.bwd[op][k])
        return [
            (region, sorted(devices), tasks) for region, (devices, tasks) in sorted(groups.items())
        ]

    def _build_sync(self, pid: int) -> None:
        block: list[int] = []
        self.blocks[("sync", pid)] = block
        name = self.graph.parameters[pid].name
        for g, (w_region, holders, tasks) in enumerate(self._sync_groups(pid)):
            elements = region_volume(w_region)
            updates_after = tasks
            if len(holders) > 1:
                r = len(holders)
                size = int(2 * (r - 1) / r * elements * 4)
                gather = self._new(
                    block, BARRIER, (), 0.0, task_key(GATHER_KEY, pid, g), f"{name}#{g} grads ready"
                )
                for t in tasks:
                    self._edge(t, gather)
                done = self._new(
                    block,
                    BARRIER,
                    (),
                    0.0,
                    task_key(REDUCED_KEY, pid, g),
                    f"{name}#{g} all-reduced",
                )
                for i, src in enumerate(holders):
                    dst = holders[(i + 1) % r]
                    x = self._transfer(
                        block,
                        src,
                        dst,
                        size,
                        task_key(RING_KEY, pid, g, i),
                        f"all-reduce {name}#{g} {src}->{dst}",
                    )
                    self._edge(gather, x)
                    self._edge(x, done)
                updates_after = [done]
            for d in holders:
                u = self._new(
                    block,
                    UPDATE,
                    (d,),
                    self.context.cost.update_time(elements, self.machine.devices[d]),
                    task_key(UPDATE_KEY, pid, g, d),
                    f"update {name}#{g}@{d}",
                )
                for t in updates_after:
                    self._edge(t, u)

    # ---- memory ---------------------------------------------------------------------------------
    def memory_per_device(self) -> list[int]:
        """Bytes each device holds at the end of the forward pass (the peak of an iteration).

        Weights with their gradients and one optimizer state (3 copies of every weight region it
        holds), every output tile it computed (kept for backward), and every input region it
        received from another device.
        """
        memory = [0] * self.num_devices
        for pid in self._users:
            for region, holders, _ in self._sync_groups(pid):
                for device in holders:
                    memory[device] += 3 * 4 * region_volume(region)
        for node in self.graph.ops:
            config = self.configs[node.id]
            for k, region in enumerate(self.context.regions(node.id, config.degrees)):
                out = node.op.output_regions(node.sig, region)
                memory[config.devices[k]] += sum(
                    region_volume(r) * spec.dtype.itemsize
                    for r, spec in zip(out, node.sig.outputs, strict=True)
                )
        for block, tasks in self.blocks.items():
            if block[0] == "edge":
                for t in tasks:  # forward activations received from another device
                    if key_kind(self.order[t]) == XFER_KEY:
                        memory[self.res_dst[t]] += self.size_bytes[t]
        return memory
