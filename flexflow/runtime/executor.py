"""Training iterations of an operator graph under a SOAP strategy, as Legate tasks (paper §7).

Every tensor, weight and gradient is a Legate store. Each task of an op's configuration is one
Legate task placed on its strategy's processor (a `Scope` of that one CPU), reading the store
slices its input and weight regions name and writing its output tile; Legate moves the data
between processors. Backward tasks add their input and weight gradients into the gradient
stores with ADD reductions, which sums the gradients of replicated weights (and of halos) before
the update. The update is one SGD task per weight on the processor of its first task. Batch
norm's tiles first add their per-channel partial sums into a statistics store (forward: sums of
x and x^2; backward: sums of dz and dz*xhat), so any sample split normalizes with the batch's
statistics.

The loss (`flexflow.runtime.loss`) runs as one task per tile of the model's output, on that
tile's device: each writes its tile of the loss gradient (which seeds the backward pass) and adds
its share of the loss into a one-element store. The model's output is the first output of the
last op; other outputs nothing reads (an LSTM's last cell state) get zero gradients.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from legate.core import Scope, TaskTarget, get_legate_runtime, get_machine
from legate.core import types as ty

from flexflow.errors import StrategyError
from flexflow.fileio import atomic_write_bytes
from flexflow.graph import OperatorGraph
from flexflow.machine import parse_machine
from flexflow.ops.base import Region
from flexflow.ops.init import initialize
from flexflow.runtime.loss import LOSSES, TARGET_RANK, check_target
from flexflow.runtime.tasks import EXECUTOR_IDS, EXECUTORS, Pass, library_and_task
from flexflow.strategy import Strategy
from flexflow.strategy_file import validate_strategy

LEGATE_TYPES = {"float32": ty.float32, "int32": ty.int32, "int64": ty.int64}


def _slice(store, region: Region):
    for dim, (start, stop) in enumerate(region):
        store = store.slice(dim, slice(start, stop))
    return store


class Executor:
    """Holds the stores of one model and runs SGD steps under one strategy."""

    def __init__(
        self,
        graph: OperatorGraph,
        strategy: Strategy,
        seed: int = 0,
        learning_rate: float = 0.01,
        record_timeline: bool = False,
    ) -> None:
        self.graph, self.strategy, self.learning_rate = graph, strategy, learning_rate
        self.loss_fn = LOSSES["mean_squared_error"]  # set by each step; read by the loss tasks
        self.loss_total = 1
        self.timeline: list[tuple] | None = [] if record_timeline else None
        """(op, task, pass, start s, end s) of every task, measured inside the task bodies."""
        self.runtime = get_legate_runtime()
        self.cpus = get_machine().only(TaskTarget.CPU)
        available = self.cpus.count(TaskTarget.CPU)
        validate_strategy(strategy, graph, parse_machine("local"))
        used = strategy.devices_used()
        if used and used[-1] >= available:
            raise StrategyError(
                f"the strategy places tasks on device {used[-1]} but this process has "
                f"{available} CPU processor(s) (devices 0-{available - 1}); run with "
                f"`legate --cpus {used[-1] + 1}` or search for this machine (--machine local)."
            )
        self.library, self.task_id = library_and_task()
        self.id = next(EXECUTOR_IDS)
        EXECUTORS[self.id] = self
        self._regions = [
            config.task_regions(node.sig.output_shape)
            for node, config in zip(graph.ops, strategy.configs, strict=True)
        ]
        self.tensors = {
            t.id: self.runtime.create_store(LEGATE_TYPES[t.spec.dtype.value], t.spec.shape)
            for t in graph.tensors
        }
        self.grads = {
            t.id: self.runtime.create_store(ty.float32, t.spec.shape)
            for t in graph.tensors
            if t.spec.dtype.is_float
        }
        rng = np.random.default_rng(seed)
        self.weights = {p.id: self._store_of(initialize(p.spec, rng)) for p in graph.parameters}
        self.weight_grads = {
            p.id: self.runtime.create_store(ty.float32, p.spec.shape) for p in graph.parameters
        }
        # ops whose tiles share batch statistics (batch norm): per-channel sums, float64
        self.statistics = {
            node.id: (
                self.runtime.create_store(ty.float64, (2, node.sig.inputs[0].shape[1])),
                self.runtime.create_store(ty.float64, (2, node.sig.inputs[0].shape[1])),
            )
            for node in graph.ops
            if node.op.statistics_dims
        }
        self._update_device = {}
        for node, config in zip(graph.ops, strategy.configs, strict=True):
            for pid in node.weights:
                self._update_device.setdefault(pid, config.devices[0])

    def close(self) -> None:
        """Wait for this executor's tasks and release it (and its stores) from the registry."""
        self.runtime.issue_execution_fence(block=True)
        EXECUTORS.pop(self.id, None)

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def regions(self, op: int) -> tuple[Region, ...]:
        return self._regions[op]

    # ---- data in and out -----------------------------------------------------------------------
    def _store_of(self, array: np.ndarray):
        array = np.ascontiguousarray(array)
        dtype = LEGATE_TYPES[str(array.dtype)] if str(array.dtype) in LEGATE_TYPES else None
        if dtype is None:
            array = array.astype(np.float32)
            dtype = ty.float32
        store = self.runtime.create_store(dtype, array.shape)
        source = self.runtime.create_store_from_buffer(dtype, array.shape, array, True)
        self.runtime.issue_copy(store, source)
        return store

    @staticmethod
    def _read(store) -> np.ndarray:
        return np.array(store.get_physical_store().get_inline_allocation())

    def get_weights(self) -> dict[str, np.ndarray]:
        """Every weight by name (`<layer>.<weight>`), as numpy arrays."""
        return {self.graph.parameters[p].name: self._read(s) for p, s in self.weights.items()}

    def set_weights(self, values: Mapping[str, np.ndarray]) -> None:
        by_name = {p.name: p for p in self.graph.parameters}
        for name, value in values.items():
            param = by_name[name]
            if tuple(value.shape) != param.spec.shape:
                raise StrategyError(
                    f"set_weights: '{name}' has shape {param.spec.shape}, got {tuple(value.shape)}."
                )
            self.weights[param.id] = self._store_of(np.asarray(value, dtype=np.float32))

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Write every weight to `path` (numpy .npz) atomically: a run killed mid-save leaves the
        previous checkpoint whole."""
        buffer = io.BytesIO()
        np.savez(buffer, **self.get_weights())
        return atomic_write_bytes(path, buffer.getvalue())

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore the weights `save_checkpoint` wrote; every weight of the model must be there."""
        try:
            with np.load(path) as data:
                values = {name: data[name] for name in data.files}
        except (OSError, ValueError) as exc:
            raise StrategyError(f"cannot read checkpoint {path}: {exc}") from None
        missing = sorted({p.name for p in self.graph.parameters} - set(values))
        if missing:
            raise StrategyError(
                f"checkpoint {path} lacks {len(missing)} weight(s) of this model "
                f"({', '.join(missing[:5])}); it was saved from another model."
            )
        self.set_weights(values)

    # ---- one iteration -----------------------------------------------------------------------
    def _launch(self, op: int, index: int, which: Pass) -> None:
        """One task of op `op`: its store slices in the order the task body reads them."""
        node, config = self.graph.ops[op], self.strategy[op]
        region = self._regions[op][index]
        in_regions = node.op.input_regions(node.sig, region)
        w_regions = node.op.weight_regions(node.sig, region)
        out_regions = node.op.output_regions(node.sig, region)
        stats = self.statistics.get(op)
        channels = ((0, 2), region[1]) if stats else None  # a statistics op's channel range
        device = config.devices[index]
        with Scope(machine=self.cpus[device : device + 1]):
            task = self.runtime.create_auto_task(self.library, self.task_id)
            for tid, r in zip(node.inputs, in_regions, strict=True):
                task.add_input(_slice(self.tensors[tid], r))
            if which is Pass.STATISTICS_FORWARD:
                task.add_reduction(_slice(stats[0], channels), ty.ReductionOpKind.ADD)
            else:
                for pid, r in zip(node.weights, w_regions, strict=True):
                    task.add_input(_slice(self.weights[pid], r))
            if which is Pass.FORWARD:
                if stats:
                    task.add_input(_slice(stats[0], channels))
                for tid, r in zip(node.outputs, out_regions, strict=True):
                    task.add_output(_slice(self.tensors[tid], r))
            elif which in (Pass.BACKWARD, Pass.STATISTICS_BACKWARD):
                for tid, r in zip(node.outputs, out_regions, strict=True):
                    task.add_input(_slice(self.tensors[tid], r))
                for tid, r in zip(node.outputs, out_regions, strict=True):
                    task.add_input(_slice(self.grads[tid], r))
                if stats:
                    task.add_input(_slice(stats[0], channels))
            if which is Pass.STATISTICS_BACKWARD:
                task.add_reduction(_slice(stats[1], channels), ty.ReductionOpKind.ADD)
            elif which is Pass.BACKWARD:
                if stats:
                    task.add_input(_slice(stats[1], channels))
                for tid, spec, r in zip(node.inputs, node.sig.inputs, in_regions, strict=True):
                    if spec.dtype.is_float:
                        task.add_reduction(_slice(self.grads[tid], r), ty.ReductionOpKind.ADD)
                for pid, r in zip(node.weights, w_regions, strict=True):
                    task.add_reduction(_slice(self.weight_grads[pid], r), ty.ReductionOpKind.ADD)
            for value in (self.id, op, index, int(which)):
                task.add_scalar_arg(value, ty.int64)
            task.execute()

    def _run_op(self, op: int, which: Pass) -> None:
        """Every task of `op` for one pass; ops sharing batch statistics first reduce them."""
        tasks = range(self.strategy[op].num_tasks)
        if op in self.statistics:
            before = Pass.STATISTICS_FORWARD if which is Pass.FORWARD else Pass.STATISTICS_BACKWARD
            self.runtime.issue_fill(self.statistics[op][0 if which is Pass.FORWARD else 1], 0.0)
            for index in tasks:
                self._launch(op, index, before)
        for index in tasks:
            self._launch(op, index, which)

    def _sgd(self, pid: int) -> None:
        device = self._update_device[pid]
        updated = self.runtime.create_store(ty.float32, self.graph.parameters[pid].spec.shape)
        with Scope(machine=self.cpus[device : device + 1]):
            task = self.runtime.create_auto_task(self.library, self.task_id)
            task.add_input(self.weights[pid])
            task.add_input(self.weight_grads[pid])
            task.add_output(updated)
            for value in (self.id, -1, -1, int(Pass.SGD)):
                task.add_scalar_arg(value, ty.int64)
            task.execute()
        self.weights[pid] = updated

    def forward(self, inputs: Mapping[str, np.ndarray], read: bool = True) -> np.ndarray | None:
        """Run the forward pass on `inputs` (by input tensor name); the model's output."""
        for tensor in self.graph.input_tensors:
            self.runtime.issue_copy(self.tensors[tensor.id], self._store_of(inputs[tensor.name]))
        for op in range(len(self.graph.ops)):
            self._run_op(op, Pass.FORWARD)
        return self._read(self.tensors[self._output]) if read else None

    @property
    def _output(self) -> int:
        return self.graph.ops[-1].outputs[0]

    def step(
        self,
        inputs: Mapping[str, np.ndarray],
        target: np.ndarray,
        loss: str = "mean_squared_error",
    ) -> float:
        """One SGD step on `loss` against `target` (labels for cross-entropy); the loss before it."""
        self.forward(inputs, read=False)
        for store in list(self.grads.values()) + list(self.weight_grads.values()):
            self.runtime.issue_fill(store, 0.0)
        value = self._loss(loss, np.asarray(target))
        for op in reversed(range(len(self.graph.ops))):
            self._run_op(op, Pass.BACKWARD)
        for pid in self.weights:
            self._sgd(pid)
        return value

    def _loss(self, name: str, target: np.ndarray) -> float:
        """Loss tasks on the output's tiles; returns the loss (the one value read back)."""
        output_op = len(self.graph.ops) - 1
        node, config = self.graph.ops[output_op], self.strategy[output_op]
        shape = node.sig.outputs[0].shape
        check_target(name, shape, target)
        self.loss_fn = LOSSES[name]
        target_rank = TARGET_RANK[name](len(shape))
        self.loss_total = int(np.prod(shape)) if target_rank == len(shape) else shape[0]
        target_store = self._store_of(target)
        total = self.runtime.create_store(ty.float64, (1,))
        self.runtime.issue_fill(total, 0.0)
        for index, region in enumerate(self._regions[output_op]):
            device = config.devices[index]
            with Scope(machine=self.cpus[device : device + 1]):
                task = self.runtime.create_auto_task(self.library, self.task_id)
                task.add_input(_slice(self.tensors[self._output], region))
                task.add_input(_slice(target_store, region[:target_rank]))
                task.add_output(_slice(self.grads[self._output], region))
                task.add_reduction(total, ty.ReductionOpKind.ADD)
                for value in (self.id, output_op, index, int(Pass.LOSS)):
                    task.add_scalar_arg(value, ty.int64)
                task.execute()
        return float(self._read(total)[0])
