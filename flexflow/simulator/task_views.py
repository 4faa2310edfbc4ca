"""What a task graph says about itself to people and tests: each task's name, kind and
resources, the dependencies as lists, each block's tasks and edges, and the memory each device
holds (paper §5.1's task graph, read back).

A search builds millions of tasks and reads none of this, so nothing here is stored: it is
derived on demand from the task keys, resource sets and edge arrays `TaskGraph` keeps
(flexflow/simulator/taskgraph.py), which inherits these views.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.ops.base import Region, region_volume
from flexflow.simulator.context import SimContext
from flexflow.simulator.keys import (
    BWD_KEY,
    FWD_KEY,
    GATHER_KEY,
    GRAD_XFER_KEY,
    REDUCED_KEY,
    RING_KEY,
    UPDATE_KEY,
    XFER_KEY,
    key_fields,
    key_kind,
)
from flexflow.simulator.resources import ResourceSets
from flexflow.strategy import ParallelConfig

COMPUTE, COMM, UPDATE, BARRIER = "compute", "comm", "update", "barrier"

Block = tuple  # ("op", i) | ("edge", consumer, input index) | ("sync", parameter id)


class TaskGraphViews:
    """Read-only views of a `TaskGraph`'s tasks, derived when asked (exports, plots, tests)."""

    # what TaskGraph sets (flexflow/simulator/taskgraph.py)
    context: SimContext
    graph: OperatorGraph
    machine: Machine
    num_devices: int
    resource_sets: ResourceSets
    configs: list[ParallelConfig]
    order: array
    res_set: array
    size_bytes: array
    res_src: array
    res_dst: array
    edge_src: array
    edge_dst: array
    _users: dict[int, list[int]]
    _block_names: tuple[Block, ...]
    _block_numbers: dict[Block, int]
    _block_tasks: list[array]
    _block_ranges: array
    _first_edge: int
    _first_sync: int

    @property
    def size(self) -> int:
        """Number of task ids (including free ones)."""
        return len(self.order)

    @property
    def res(self) -> _PerTask:
        """`res[t]`: the devices (ids) and links (num_devices + link id) task `t` holds."""
        sets, res_set = self.resource_sets.sets, self.res_set
        return _PerTask(lambda t: sets[res_set[t]])

    @property
    def kind(self) -> _PerTask:
        """`kind[t]`: COMPUTE, COMM, UPDATE or BARRIER."""
        order = self.order
        return _PerTask(lambda t: _KIND_NAMES[key_kind(order[t])])

    @property
    def name(self) -> _PerTask:
        """`name[t]`: what task `t` is, for traces and exports."""
        return _PerTask(self.task_name)

    def task_name(self, t: int) -> str:
        """Task `t`'s name, read from its key (and a transfer's devices)."""
        kind, a, b, c, d = key_fields(self.order[t])
        if kind in (FWD_KEY, BWD_KEY):
            return f"{self.graph.ops[a].name}[{b}].{'fwd' if kind == FWD_KEY else 'bwd'}"
        if kind in (XFER_KEY, GRAD_XFER_KEY):
            consumer = self.graph.ops[a]
            producer = self.graph.ops[self.graph.tensor(consumer.inputs[b]).producer]
            label = f"{producer.name}[{d}]->{consumer.name}[{c}]"
            return label if kind == XFER_KEY else f"grad {label}"
        weight = f"{self.graph.parameters[a].name}#{b}"
        if kind == GATHER_KEY:
            return f"{weight} grads ready"
        if kind == REDUCED_KEY:
            return f"{weight} all-reduced"
        if kind == RING_KEY:
            return f"all-reduce {weight} {self.res_src[t]}->{self.res_dst[t]}"
        return f"update {weight}@{c}"

    def resource_name(self, r: int) -> str:
        if r < self.num_devices:
            return self.machine.devices[r].name
        return self.machine.links[r - self.num_devices].name

    def parameter_users(self, pid: int) -> list[int]:
        """The ops that use parameter `pid`, whose tasks its sync block joins."""
        return self._users[pid]

    def parameters(self) -> list[int]:
        """The parameters some op uses: each has a sync block."""
        return list(self._users)

    @property
    def blocks(self) -> dict[Block, array]:
        """Every block's task ids, by block name (for tests and exports)."""
        return dict(zip(self._block_names, self._block_tasks, strict=True))

    def block_edges(self, block: Block) -> tuple[array, array]:
        """A block's edges: (sources, destinations)."""
        b = self._block_numbers[block]
        lo, hi = self._block_ranges[2 * b], self._block_ranges[2 * b + 1]
        return self.edge_src[lo:hi], self.edge_dst[lo:hi]

    def predecessors(self) -> list[list[int]]:
        """Each task id's predecessors (none for free ids), for exports and tests."""
        return self._neighbours(self.edge_dst, self.edge_src)

    def successors(self) -> list[list[int]]:
        """Each task id's successors (none for free ids), for exports and tests."""
        return self._neighbours(self.edge_src, self.edge_dst)

    def _neighbours(self, of: array, listed: array) -> list[list[int]]:
        """Per task id, the `listed` ends of the live edges whose `of` end it is."""
        found: list[list[int]] = [[] for _ in range(self.size)]
        for src, task, other in zip(self.edge_src, of, listed, strict=True):
            if src >= 0:  # a removed edge's source is -1
                found[task].append(other)
        return found

    def _weight_holders(self, pid: int) -> dict[Region, set[int]]:
        """The devices holding each region of parameter `pid` that some task reads (what a
        sync block groups by: native/blocks.c builds the groups themselves)."""
        holders: dict[Region, set[int]] = {}
        for op in self._users[pid]:
            for region, devices, _ in self.context.op_sync_groups(op, pid, self.configs[op]):
                holders.setdefault(region, set()).update(devices)
        return holders

    def memory_per_device(self) -> list[int]:
        """Bytes each device holds at the end of the forward pass (the peak of an iteration).

        Weights with their gradients and one optimizer state (3 copies of every weight region it
        holds), every output tile it computed (kept for backward), and every input region it
        received from another device.
        """
        memory = [0] * self.num_devices
        for pid in self._users:
            for region, holders in self._weight_holders(pid).items():
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
        for tasks in self._block_tasks[self._first_edge : self._first_sync]:  # edge blocks
            for t in tasks:  # forward activations received from another device
                if key_kind(self.order[t]) == XFER_KEY:
                    memory[self.res_dst[t]] += self.size_bytes[t]
        return memory


_KIND_NAMES = {
    FWD_KEY: COMPUTE,
    BWD_KEY: COMPUTE,
    XFER_KEY: COMM,
    GRAD_XFER_KEY: COMM,
    RING_KEY: COMM,
    GATHER_KEY: BARRIER,
    REDUCED_KEY: BARRIER,
    UPDATE_KEY: UPDATE,
}


class _PerTask:
    """A read-only per-task sequence computed on access (`view[t]`)."""

    __slots__ = ("_get",)

    def __init__(self, get: Callable[[int], Any]) -> None:
        self._get = get

    def __getitem__(self, t: int) -> Any:
        return self._get(t)
