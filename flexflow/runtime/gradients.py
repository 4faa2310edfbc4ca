"""The stores of an executor's tensor gradients, and of the parts some are kept in.

A tensor read across fused groups gets its gradient from every task reading it, each adding
its tile's contribution (a Legate ADD reduction). Where tasks on different devices, or two
arguments of one task, would add into overlapping regions of one store, the gradient is kept
in several parts (`flexflow.gradient_parts`): each argument adds into its part, and the
producer's backward tasks read every part over their tiles and sum them in the task body
(`flexflow.fused_run.summed_parts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from legate.core import types as ty

from flexflow.fusion import FusedGroup, FusedTask, Slot, SlotKind
from flexflow.gradient_parts import TaskKey, Writer, plan_parts
from flexflow.graph import OperatorGraph
from flexflow.ops.base import Region
from flexflow.strategy import Strategy

Argument = tuple[Any, Region]
"""A store and a region of it, as a task names it."""


def gradient_writers(
    groups: Sequence[FusedGroup], tasks: Sequence[Sequence[FusedTask]], strategy: Strategy
) -> dict[int, list[tuple[Writer, ...]]]:
    """Per tensor, the reduction arguments adding into its gradient (`TaskLayout.reductions`),
    as units that name one store together: a concurrent launch's points' arguments in one
    position, or one task's argument."""
    units: dict[int, list[tuple[Writer, ...]]] = {}
    for g, (group, group_tasks) in enumerate(zip(groups, tasks, strict=True)):
        devices = strategy[group.ops[0]].devices
        per_task = [
            [((g, task.index), device, slot.region) for slot in task.backward.reductions]
            for task, device in zip(group_tasks, devices, strict=True)
        ]
        tensors = [slot.id for slot in group_tasks[0].backward.reductions]
        if group.exchanges:  # one launch: each argument one store for every point
            for tensor, column in zip(tensors, zip(*per_task, strict=True), strict=True):
                units.setdefault(tensor, []).append(tuple(column))
            continue
        for task, writers in zip(group_tasks, per_task, strict=True):
            for slot, writer in zip(task.backward.reductions, writers, strict=True):
                units.setdefault(slot.id, []).append((writer,))
    return units


class GradientStores:
    """Every float tensor's gradient store (`stores`), the other parts of those kept in
    several, and which parts each backward task adds into and reads."""

    def __init__(
        self,
        runtime: Any,
        graph: OperatorGraph,
        groups: Sequence[FusedGroup],
        tasks: Sequence[Sequence[FusedTask]],
        strategy: Strategy,
    ) -> None:
        self.runtime, self.graph, self.groups, self.tasks = runtime, graph, groups, tasks
        self.stores = {
            t.id: runtime.create_store(ty.float32, t.spec.shape)
            for t in graph.tensors
            if t.spec.dtype.is_float
        }
        """Tensor -> its gradient store (a gradient's first part)."""
        self.plan = plan_parts(gradient_writers(groups, tasks, strategy))
        self._parts = {
            tid: (self.stores[tid],)
            + tuple(runtime.create_store(ty.float32, self.stores[tid].shape) for _ in range(n - 1))
            for tid, n in self.plan.counts.items()
        }
        self._group_of = {op: g for g, group in enumerate(groups) for op in group.ops}
        self.reads = self._reads()
        """(group, task index) -> per input slot of its backward, the parts it reads and sums;
        only tasks reading a gradient of several parts."""
        self._alone: dict[tuple[int, int], tuple[int, ...]] = {}  # alone_read_counts

    def fill_zeros(self, tensors: Sequence[int]) -> None:
        """Zero every part of these tensors' gradients (before the backward tasks add)."""
        for tid in tensors:
            for store in self._parts.get(tid, (self.stores[tid],)):
                self.runtime.issue_fill(store, 0.0)

    def reduction_argument(self, slot: Slot, task: TaskKey) -> Argument:
        """Where task `task` adds its gradient `slot`: its part of the gradient."""
        part = self.plan.part_of(slot.id, task, slot.region)
        return self._parts[slot.id][part] if part else self.stores[slot.id], slot.region

    def backward_arguments(
        self, group: int, index: int, argument: Callable[[Slot], Argument]
    ) -> list[Argument]:
        """The arguments of a fused backward's input slots, `argument(slot)` each, but a
        gradient kept in several parts as one argument per part the task reads."""
        layout = self.tasks[group][index].backward
        reads = self.reads.get((group, index))
        if reads is None:
            return [argument(slot) for slot in layout.inputs]
        found = []
        for slot, parts in zip(layout.inputs, reads, strict=True):
            if len(parts) == 1:
                found.append(argument(slot))
            else:
                found += [(self._parts[slot.id][part], slot.region) for part in parts]
        return found

    def read_counts(self, group: int, index: int) -> tuple[int, ...]:
        """Per input slot of a fused backward, how many arguments it arrived as
        (`backward_arguments`); empty where each is one."""
        reads = self.reads.get((group, index))
        return () if reads is None else tuple(map(len, reads))

    def alone_arguments(self, op: int, index: int, tensor: int) -> list[Argument]:
        """The arguments task `index` of op `op`, run alone (`flexflow.runtime.
        batch_statistics`), reads its output `tensor`'s gradient as: one per part it reads."""
        group = self.group_of(op)
        layout = self.tasks[group][index].backward
        at = next(
            k for k, s in enumerate(layout.inputs) if s.kind is SlotKind.GRAD and s.id == tensor
        )
        reads = self.reads.get((group, index))
        parts = (0,) if reads is None else reads[at]
        region = layout.inputs[at].region
        return [(self._parts[tensor][p] if p else self.stores[tensor], region) for p in parts]

    def alone_read_counts(self, op: int, index: int) -> tuple[int, ...]:
        """`read_counts` of a backward task of op `op` run alone: its inputs, weights and
        outputs one argument each, then its outputs' gradients (`alone_arguments`); empty
        where each is one."""
        found = self._alone.get((op, index))
        if found is None:
            node = self.graph.ops[op]
            parts = tuple(len(self.alone_arguments(op, index, t)) for t in node.outputs)
            ones = (1,) * (len(node.inputs) + len(node.weights) + len(node.outputs))
            found = ones + parts if any(n > 1 for n in parts) else ()
            self._alone[(op, index)] = found
        return found

    def group_of(self, op: int) -> int:
        """The fused group op `op` runs in."""
        return self._group_of[op]

    def _reads(self) -> dict[tuple[int, int], tuple[tuple[int, ...], ...]]:
        """`reads`: a concurrent launch's points read the same parts (their arguments are
        tilings of the same stores), the union of what each reads."""
        plan = self.plan
        if not plan.counts:
            return {}
        reads = {}
        for g, (group, tasks) in enumerate(zip(self.groups, self.tasks, strict=True)):
            per_task = [
                [
                    plan.parts_read(slot.id, (slot.region,)) if slot.kind is SlotKind.GRAD else (0,)
                    for slot in task.backward.inputs
                ]
                for task in tasks
            ]
            if group.exchanges:  # every point the union, in part order
                union = [
                    tuple(sorted(set().union(*column))) for column in zip(*per_task, strict=True)
                ]
                per_task = [union for _ in tasks]
            for task, found in zip(tasks, per_task, strict=True):
                if any(len(parts) > 1 for parts in found):
                    reads[(g, task.index)] = tuple(found)
        return reads
