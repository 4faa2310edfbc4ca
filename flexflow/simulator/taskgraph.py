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

from flexflow.cost import CostModel
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import Machine
from flexflow.ops.base import Region, region_volume
from flexflow.strategy import ParallelConfig, Strategy

COMPUTE, COMM, UPDATE, BARRIER = "compute", "comm", "update", "barrier"
FORWARD, BACKWARD = 0, 1

Block = tuple  # ("op", i) | ("edge", consumer, input index) | ("sync", parameter id)


class TaskGraph:
    """Tasks in parallel lists indexed by task id; ids of removed tasks are reused."""

    def __init__(
        self, graph: OperatorGraph, machine: Machine, strategy: Strategy, cost: CostModel
    ) -> None:
        self.graph, self.machine, self.cost = graph, machine, cost
        self.num_devices = machine.num_devices
        self.num_resources = machine.num_devices + len(machine.links)
        self.configs: list[ParallelConfig] = list(strategy.configs)
        # per task
        self.exe: list[float] = []
        self.res: list[tuple[int, ...]] = []  # devices (ids) and links (num_devices + link id)
        self.preds: list[list[int]] = []
        self.succs: list[list[int]] = []
        self.key: list[tuple] = []
        self.kind: list[str] = []
        self.size_bytes: list[int] = []
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
        key: tuple,
        name: str,
        size_bytes: int = 0,
    ) -> int:
        if self._free:
            t = self._free.pop()
            self.exe[t], self.res[t], self.key[t], self.kind[t] = exe, res, key, kind
            self.name[t], self.size_bytes[t], self.live[t] = name, size_bytes, True
            self.preds[t], self.succs[t] = [], []
        else:
            t = len(self.exe)
            self.exe.append(exe)
            self.res.append(res)
            self.key.append(key)
            self.kind.append(kind)
            self.name.append(name)
            self.size_bytes.append(size_bytes)
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
        shape = node.sig.output_shape
        fwd, bwd = [], []
        stats_s = self._statistics_s(node, config)
        for k, region in enumerate(config.task_regions(shape)):
            device = config.devices[k]
            time = self.cost.task_time(node, region, self.machine.devices[device])
            f = self._new(
                block,
                COMPUTE,
                (device,),
                time.forward_s + stats_s,
                (0, node.id, k),
                f"{node.name}[{k}].fwd",
            )
            b = self._new(
                block,
                COMPUTE,
                (device,),
                time.backward_s + stats_s,
                (1, node.id, k),
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
        region = config.task_regions(node.sig.output_shape)[0]
        size = 4 * node.op.statistics_elements(node.sig, region)
        devices = sorted(set(config.devices))
        worst = max(
            (
                self.machine.transfer_s(a, b, 2 * (ring - 1) / ring * size)
                for a, b in zip(devices, devices[1:] + devices[:1], strict=True)
                if a != b
            ),
            default=0.0,
        )
        return worst * (ring - 1)  # ring steps, each bounded by the slowest hop

    def _transfer(
        self, block: list[int], src: int, dst: int, size: int, key: tuple, name: str
    ) -> int:
        route = self.machine.route(src, dst)
        res = tuple(self.num_devices + link.id for link in route)
        exe = self.machine.transfer_s(src, dst, size)
        return self._new(block, COMM, res, exe, key, name, size)

    def _build_edge(self, consumer: OpNode, j: int) -> None:
        block: list[int] = []
        self.blocks[("edge", consumer.id, j)] = block
        tensor = self.graph.tensor(consumer.inputs[j])
        if tensor.producer is None:
            return
        producer = self.graph.ops[tensor.producer]
        p_config, c_config = self.configs[producer.id], self.configs[consumer.id]
        out_shape = tensor.spec.shape
        # producer tiles of this output form a grid: degree 1 where the op cannot split
        p_degrees = tuple(
            deg if dim.partitionable else 1
            for deg, dim in zip(p_config.degrees, producer.sig.dims, strict=True)
        )
        steps = [size // deg for size, deg in zip(out_shape, p_degrees, strict=True)]
        strides = [math.prod(p_degrees[d + 1 :]) for d in range(len(p_degrees))]
        itemsize = tensor.spec.dtype.itemsize
        grads = tensor.spec.dtype.is_float
        for kc, c_region in enumerate(c_config.task_regions(consumer.sig.output_shape)):
            need = consumer.op.input_regions(consumer.sig, c_region)[j]
            c_dev = c_config.devices[kc]
            for kp, volume in _overlaps(need, steps, strides, out_shape, p_degrees):
                p_dev = p_config.devices[kp]
                f_p, f_c = self.fwd[producer.id][kp], self.fwd[consumer.id][kc]
                b_p, b_c = self.bwd[producer.id][kp], self.bwd[consumer.id][kc]
                if p_dev == c_dev:
                    self._edge(f_p, f_c)
                    self._edge(b_c, b_p)
                    continue
                size = volume * itemsize
                label = f"{producer.name}[{kp}]->{consumer.name}[{kc}]"
                x = self._transfer(block, p_dev, c_dev, size, (2, consumer.id, j, kc, kp), label)
                self._edge(f_p, x)
                self._edge(x, f_c)
                if grads:
                    y = self._transfer(
                        block, c_dev, p_dev, size, (3, consumer.id, j, kc, kp), f"grad {label}"
                    )
                    self._edge(b_c, y)
                    self._edge(y, b_p)
                else:
                    self._edge(b_c, b_p)

    def _build_sync(self, pid: int) -> None:
        block: list[int] = []
        self.blocks[("sync", pid)] = block
        param = self.graph.parameters[pid]
        groups: dict[Region, tuple[list[int], list[int]]] = {}
        for op in self._users[pid]:
            node = self.graph.ops[op]
            config = self.configs[op]
            w = node.weights.index(pid)
            for k, region in enumerate(config.task_regions(node.sig.output_shape)):
                w_region = node.op.weight_regions(node.sig, region)[w]
                devices, tasks = groups.setdefault(w_region, ([], []))
                if config.devices[k] not in devices:
                    devices.append(config.devices[k])
                tasks.append(self.bwd[op][k])
        for g, (w_region, (devices, tasks)) in enumerate(sorted(groups.items())):
            elements = region_volume(w_region)
            holders = sorted(devices)
            updates_after = tasks
            if len(holders) > 1:
                r = len(holders)
                size = int(2 * (r - 1) / r * elements * 4)
                gather = self._new(
                    block, BARRIER, (), 0.0, (4, pid, g, -1), f"{param.name}#{g} grads ready"
                )
                for t in tasks:
                    self._edge(t, gather)
                done = self._new(
                    block, BARRIER, (), 0.0, (6, pid, g, -1), f"{param.name}#{g} all-reduced"
                )
                for i, src in enumerate(holders):
                    dst = holders[(i + 1) % r]
                    x = self._transfer(
                        block,
                        src,
                        dst,
                        size,
                        (5, pid, g, i),
                        f"all-reduce {param.name}#{g} {src}->{dst}",
                    )
                    self._edge(gather, x)
                    self._edge(x, done)
                updates_after = [done]
            for d in holders:
                u = self._new(
                    block,
                    UPDATE,
                    (d,),
                    self.cost.update_time(elements, self.machine.devices[d]),
                    (7, pid, g, d),
                    f"update {param.name}#{g}@{d}",
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
        for pid, users in self._users.items():
            held: set[tuple[int, Region]] = set()
            for op in users:
                node, config = self.graph.ops[op], self.configs[op]
                w = node.weights.index(pid)
                for k, region in enumerate(config.task_regions(node.sig.output_shape)):
                    held.add((config.devices[k], node.op.weight_regions(node.sig, region)[w]))
            for device, region in held:
                memory[device] += 3 * 4 * region_volume(region)
        for node in self.graph.ops:
            config = self.configs[node.id]
            for k, region in enumerate(config.task_regions(node.sig.output_shape)):
                out = node.op.output_regions(node.sig, region)
                memory[config.devices[k]] += sum(
                    region_volume(r) * spec.dtype.itemsize
                    for r, spec in zip(out, node.sig.outputs, strict=True)
                )
        for t in self.live_tasks():
            if self.kind[t] == COMM and self.key[t][0] == 2:  # forward activations received
                consumer_dev = self._comm_destination(t)
                memory[consumer_dev] += self.size_bytes[t]
        return memory

    def _comm_destination(self, t: int) -> int:
        _, consumer, _, kc, _ = self.key[t]
        return self.configs[consumer].devices[kc]


def _overlaps(
    need: Region,
    steps: list[int],
    strides: list[int],
    shape: tuple[int, ...],
    degrees: tuple[int, ...],
) -> Iterable[tuple[int, int]]:
    """(producer task index, overlap volume) for every producer tile meeting region `need`.

    Producer tiles form a grid (`degrees`, tile size `steps`), so the tiles meeting `need` are
    found per dimension by index arithmetic instead of testing every pair.
    """
    per_dim: list[list[tuple[int, int]]] = []
    for (lo, hi), step, size, deg in zip(need, steps, shape, degrees, strict=True):
        if hi <= lo:
            return
        hits = []
        for c in range(lo // step, min((hi - 1) // step, deg - 1) + 1):
            a, b = max(lo, c * step), min(hi, (c + 1) * step, size)
            if b > a:
                hits.append((c, b - a))
        per_dim.append(hits)
    for combo in itertools.product(*per_dim):
        index = sum(c * s for (c, _), s in zip(combo, strides, strict=True))
        yield index, math.prod(length for _, length in combo)
