"""Ops with batch statistics (batch norm) on Legate: their tasks, around the statistics' sums.

Such an op never joins a fused group (`flexflow.fusion`). Its tiles first write their
per-channel partial sums (forward: sums of x and x^2; backward: sums of dz and dz*xhat), each
into its own row of a statistics store, then every tile sums the rows of its channels, in row
order, and normalizes with the whole batch's statistics, so any sample split computes what
one device would (paper §5's all-reduce of the statistics). Rows, not an ADD reduction into
one store: Legate runs reductions into one region one task after another, even on several
processors (`flexflow.gradient_parts`). Training folds each batch's statistics into running (mean, variance) stores;
evaluation normalizes with those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from legate.core import Scope
from legate.core import types as ty

from flexflow.fusion import Slot, SlotKind, TaskLayout
from flexflow.graph import OperatorGraph
from flexflow.runtime.passes import Pass

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


class BatchStatistics:
    """The statistics and running-statistics stores of every op with batch statistics, and
    the tasks of such an op for one pass (`run`)."""

    def __init__(
        self,
        runtime: Any,
        graph: OperatorGraph,
        store_of: Callable,
        tasks: Mapping[int, int],
        rows: Mapping[int, int] | None = None,
    ) -> None:
        """`tasks`: each op's task count (its statistics' rows); `rows`: the ops whose running
        statistics have a copy per point of a concurrent launch, and how many."""
        self.runtime, self.rows = runtime, dict(rows or {})
        channels = {
            node.id: node.sig.inputs[0].shape[1] for node in graph.ops if node.op.statistics_dims
        }
        self.sums = {
            op: tuple(runtime.create_store(ty.float64, (tasks[op], 2, c)) for _ in range(2))
            for op, c in channels.items()
        }
        """Per op, its forward (x, x^2) and backward (dz, dz*xhat) sums per channel, float64,
        a row per task (zero where the task's channels are not), summed by their readers."""
        self.running = {
            op: store_of(self.stored_running(op, np.stack([np.zeros(c), np.ones(c)])))
            for op, c in channels.items()
        }
        """Per op, the running (mean, variance) per channel: what evaluation normalizes with;
        for the ops in `rows`, one equal copy per point of their group's concurrent launches,
        which each point updates (flexflow.runtime.concurrent)."""

    def stored_running(self, op: int, value: np.ndarray) -> np.ndarray:
        """Op `op`'s (2, C) running statistics as its store holds them."""
        rows = self.rows.get(op)
        if rows is None:
            return value
        return np.ascontiguousarray(np.broadcast_to(value, (rows, *value.shape)))

    def running_value(self, op: int, stored: np.ndarray) -> np.ndarray:
        """Op `op`'s (2, C) running statistics from what its store holds (`stored_running`:
        the points' rows are equal, each having added the same exchanged statistics)."""
        return stored[0] if op in self.rows else stored

    def run(self, executor: Executor, op: int, which: Pass, training: bool) -> None:
        """Every task of op `op` for one pass (FORWARD or BACKWARD), after the statistics."""
        tasks = range(executor.strategy[op].num_tasks)
        if which is Pass.FORWARD and not training:
            self._running(executor, op, update=False)  # evaluation: the running statistics
        else:
            before = Pass.STATISTICS_FORWARD if which is Pass.FORWARD else Pass.STATISTICS_BACKWARD
            self.runtime.issue_fill(self.sums[op][0 if which is Pass.FORWARD else 1], 0.0)
            for index in tasks:
                self._launch(executor, op, index, before)
            if which is Pass.FORWARD:
                self._running(executor, op, update=True)
        for index in tasks:
            self._launch(executor, op, index, which)

    def _running(self, executor: Executor, op: int, update: bool) -> None:
        """Training: fold the batch's statistics into the running ones. Evaluation: write the
        statistics store from the running ones, for the forward tiles to normalize with."""
        device = executor.strategy[op].devices[0]
        stats, running = self.sums[op][0], self.running[op]
        with Scope(machine=executor.processors[device]):
            task = executor.new_task(device, Pass.RUNNING_STATISTICS, op, 0, int(update))
            if update:
                task.add_input(stats)
                task.add_input(running)
                task.add_output(running)
            else:
                task.add_input(running)
                task.add_output(stats)
            task.execute()

    def _launch(self, executor: Executor, op: int, index: int, which: Pass) -> None:
        """One task of the op: its store slices in the order the task body reads them."""
        node, config = executor.graph.ops[op], executor.strategy[op]
        region = executor.regions(op)[index]
        in_regions = node.op.input_regions(node.sig, region)
        w_regions = node.op.weight_regions(node.sig, region)
        out_regions = node.op.output_regions(node.sig, region)
        stats = self.sums[op]
        rows = stats[0].shape[0]
        channels = ((0, rows), (0, 2), region[1])  # every task's row of the task's channels
        own = ((index, index + 1), (0, 2), region[1])  # the row this task writes
        device = config.devices[index]
        tensors = executor.tensors
        tile = executor.arguments.tile  # views kept between iterations: ~15 us each to make
        with Scope(machine=executor.processors[device]):
            task = executor.new_task(device, which, op, index)
            for tid, r in zip(node.inputs, in_regions, strict=True):
                task.add_input(tile(tensors[tid], r))
            if which is Pass.STATISTICS_FORWARD:
                task.add_output(tile(stats[0], own))
                task.execute()
                return
            for pid, r in zip(node.weights, w_regions, strict=True):
                task.add_input(tile(executor.params.weights[pid], r))
            if which is Pass.FORWARD:
                task.add_input(tile(stats[0], channels))
                for tid, r in zip(node.outputs, out_regions, strict=True):
                    task.add_output(tile(tensors[tid], r))
                task.execute()
                return
            for tid, r in zip(node.outputs, out_regions, strict=True):
                task.add_input(tile(tensors[tid], r))
            for tid in node.outputs:  # (one argument per part of its gradient, summed)
                for argument in executor.gradients.alone_arguments(op, index, tid):
                    task.add_input(tile(*argument))
            task.add_input(tile(stats[0], channels))
            if which is Pass.STATISTICS_BACKWARD:
                task.add_output(tile(stats[1], own))
                task.execute()
                return
            task.add_input(tile(stats[1], channels))
            key = (executor.gradients.group_of(op), index)
            for tid, spec, r in zip(node.inputs, node.sig.inputs, in_regions, strict=True):
                if spec.dtype.is_float:
                    slot = Slot(SlotKind.GRAD, tid, r)
                    task.add_reduction(
                        tile(*executor.gradients.reduction_argument(slot, key)),
                        ty.ReductionOpKind.ADD,
                    )
            weight_slots = tuple(
                Slot(SlotKind.WEIGHT_GRAD, pid, r)
                for pid, r in zip(node.weights, w_regions, strict=True)
            )
            executor.arguments.add_partial_grads(task, TaskLayout((), (), (), weight_slots), device)
            task.execute()
