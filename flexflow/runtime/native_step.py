"""A fused training step as one C call (native/step.c): the forward, loss and backward of a
step task whose ops all have C kernels, so the task holds the interpreter lock only to name its
arrays.

Why: Legate runs every processor's task bodies in this one Python process. Python between a
task's kernels holds the lock the other processors' tasks wait for, and runs 2-3x slower there
than alone: with the MLP's step tasks on two CPUs, each 100 us of Python added to a task added
0.1-0.2 ms to an iteration. The chains this runs: dense layers (relu or none), after a flat
or not, ending in a softmax under sparse categorical cross-entropy, float32, with every weight
gradient written whole by its task and no input gradient leaving it (data parallelism, one
device); any other step runs op by op (flexflow.fused_run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from flexflow._kernels import ffi, lib
from flexflow.errors import ShapeError
from flexflow.fusion import FusedTask, Slot, SlotKind
from flexflow.ops import blas
from flexflow.ops.activations import ActiMode
from flexflow.ops.dense import Dense
from flexflow.ops.flat import Flat
from flexflow.ops.softmax import Softmax
from flexflow.runtime.flat import FlatLayout
from flexflow.runtime.loss import (
    LOSS_IDS,
    checked_labels,
    predictions_per_sample,
    shaped_labels,
)

SPARSE_CROSSENTROPY = LOSS_IDS.index("sparse_categorical_crossentropy")
"""The loss a native step computes (a step under another loss runs op by op)."""
_RELU = {ActiMode.AC_MODE_NONE: 0, ActiMode.AC_MODE_RELU: 1}
LOG_UPDATE, LOG_STEP = lib.FF_LOG_UPDATE, lib.FF_LOG_STEP
LOG_CAPACITY = 1 << 16
"""Calls a step's log keeps until they are taken (the executor takes them when its timeline is
read): 2 MiB per step task."""


@dataclass(frozen=True, slots=True)
class _Layer:
    """One op of the chain: its kind, relu flag, (m, n, k) and its weights' slots."""

    kind: int
    relu: int
    dims: tuple[int, int, int]
    """Dense: rows, outputs, inputs; softmax: rows, classes, 0."""
    weights: tuple[Slot, ...]
    weight_grads: tuple[Slot, ...]


def _tile_shape(slot: Slot) -> tuple[int, ...]:
    return tuple(stop - start for start, stop in slot.region)


def _layers(task: FusedTask) -> tuple[_Layer, ...] | None:
    """The chain's layers, or None when the task is not such a chain (see the module doc)."""
    backward, forward = task.backward, task.forward
    if backward.reductions or backward.accumulators or not task.step_ready:
        return None
    # the arguments `NativeStep.run_flat` expects: the chain's input tile, then weights only
    if forward.inputs[0] != task.steps[0].inputs[0][1]:
        return None
    if any(slot.kind is not SlotKind.WEIGHT for slot in forward.inputs[1:]):
        return None
    layers = []
    for position, step in enumerate(task.steps):
        op, sig = step.node.op, step.node.sig
        if any(spec.dtype.value != "float32" for spec in (*sig.inputs, *sig.outputs)):
            return None
        if len(step.inputs) != 1 or len(step.outputs) != 1:
            return None
        if position > 0 and step.inputs[0][0] != task.steps[position - 1].outputs[0][0]:
            return None  # each op reads the one before it
        x_shape, y_shape = _tile_shape(step.inputs[0][1]), _tile_shape(step.outputs[0][2])
        rows = int(np.prod(y_shape[:-1], dtype=np.int64))
        last = position == len(task.steps) - 1
        if position == 0 and isinstance(op, Flat) and not last:
            continue  # a reshape: the next op reads its input's tile as (rows, features)
        if isinstance(op, Dense) and op.activation in _RELU and not last:
            layer = (lib.FF_STEP_DENSE, _RELU[op.activation], (rows, y_shape[-1], x_shape[-1]))
        elif isinstance(op, Softmax) and last and op.axis % len(y_shape) == len(y_shape) - 1:
            layer = (lib.FF_STEP_SOFTMAX, 0, (rows, y_shape[-1], 0))
        else:
            return None
        layers.append(_Layer(*layer, step.weights, step.weight_grads))
    return tuple(layers)


class NativeStep:
    """A step task's C program: its ops' structs and the buffers between them (activations,
    their gradients), made once and reused every iteration: a processor runs one task at a
    time, and a program serves one task. `run` names the iteration's arrays and calls it."""

    def __init__(
        self, task: FusedTask, layers: Sequence[_Layer], flat: FlatLayout | None = None
    ) -> None:
        self.task, self.layers, self.flat = task, tuple(layers), flat
        self.prediction_shape = _tile_shape(task.output_slot)
        self._ops = ffi.new("ff_step_op[]", len(layers))
        self._loss = ffi.new("ff_step_loss *")
        self._kept: np.ndarray | None = None  # the labels the loss struct points at
        self._plan = ffi.new("ff_step_plan *")
        """What the C++ step task's body runs (flexflow.runtime.native_tasks)."""
        self._plan.gemm = ffi.cast("ff_sgemm_fn", blas.sgemm_address() or 0)
        self._plan.ops, self._plan.count, self._plan.loss = self._ops, len(layers), self._loss
        self._plan.log = ffi.NULL
        self.buffers: list[np.ndarray] = []
        """The arrays between the ops, which the structs point at."""
        ops = self._ops
        for i, layer in enumerate(self.layers):
            m, n, k = layer.dims
            ops[i].kind, ops[i].relu, ops[i].m, ops[i].n, ops[i].k = layer.kind, layer.relu, m, n, k
            ops[i].y, ops[i].dy = self._buffer(m, n), self._buffer(m, n)
            ops[i].dz = self._buffer(m, n) if layer.relu else ffi.NULL
            # an op's input gradient is the gradient of the op before's output; none for the first
            ops[i].dx = ops[i - 1].dy if i else ffi.NULL
            if i:
                ops[i].x = ops[i - 1].y
            if flat is not None and layer.weights:  # where its weights sit in flat buffers
                starts = [flat.ranges[slot.id][0] for slot in layer.weights] + [-1]
                ops[i].w_at, ops[i].b_at = starts[0], starts[1]
                ops[i].dw_at, ops[i].db_at = starts[0], starts[1]

    def record(self, capacity: int = LOG_CAPACITY) -> None:
        """Log when each call of the C++ task body runs (`take_log`), up to `capacity` entries
        not yet taken; entries beyond that are dropped and counted (`dropped`)."""
        self._log_entries = np.zeros((capacity, 4), dtype=np.float64)
        self._log = ffi.new("ff_step_log *")
        self._log.entries = ffi.cast("double *", ffi.from_buffer(self._log_entries))
        self._log.capacity = capacity
        self._plan.log = self._log
        self._taken = np.zeros((capacity, 4), dtype=np.float64)

    def take_log(self) -> np.ndarray:
        """(entries, 4): begin s, end s, thread id, LOG_UPDATE or LOG_STEP of every call logged
        since the last take (none unless `record` was called)."""
        if self._plan.log == ffi.NULL:
            return np.zeros((0, 4))
        count = lib.ff_step_log_take(self._log, ffi.cast("double *", ffi.from_buffer(self._taken)))
        return self._taken[:count].copy()

    @property
    def dropped(self) -> int:
        """Log entries dropped because the ring was full."""
        return 0 if self._plan.log == ffi.NULL else int(self._log.dropped)

    @property
    def plan_address(self) -> int:
        """The address of this step's ff_step_plan, for the C++ task body; valid while this
        object lives (the executor keeps it)."""
        return int(ffi.cast("uintptr_t", self._plan))

    def valid_predictions(self, valid: int) -> int:
        """The predictions of the tile's first `valid` samples, which the loss counts."""
        shape = self.prediction_shape
        return max(0, min(valid, shape[0])) * predictions_per_sample(shape)

    def _buffer(self, rows: int, columns: int):
        array = np.zeros((rows, columns), dtype=np.float32)
        self.buffers.append(array)
        return ffi.cast("float *", ffi.from_buffer(array))

    def run(
        self,
        gemm: int,
        values: Mapping[Slot, np.ndarray],
        grads_into: Mapping[Slot, np.ndarray],
        target,
        sums: np.ndarray,
        total: int,
        valid: int,
    ) -> None:
        """One step through the sgemm at `gemm`: `values` maps the task's forward input slots
        to arrays (the model input's tile, the weights), `grads_into` its weight gradient
        slots to the arrays they are written into (all C-contiguous float32); the labels
        `target` of the first `valid` samples count; (loss / total, correct) go into `sums`."""
        ops = self._ops
        first = np.ascontiguousarray(values[self.task.steps[0].inputs[0][1]], dtype=np.float32)
        arrays = [first]  # alive until the call returns
        ops[0].x = ffi.from_buffer("float[]", first)
        for i, layer in enumerate(self.layers):
            if not layer.weights:
                continue
            named = [_checked(values[s]) for s in layer.weights]
            named += [_checked(grads_into[s], written=True) for s in layer.weight_grads]
            arrays += named
            pointers = [ffi.from_buffer("float[]", a) for a in named]
            ops[i].w, ops[i].dw = pointers[0], pointers[len(named) // 2]
            ops[i].b, ops[i].db = (pointers[1], pointers[3]) if len(named) == 4 else (ffi.NULL,) * 2
        labels = self._labels(target, sums, total, valid)
        self._call(gemm, labels, ffi.NULL, ffi.NULL)

    def run_flat(
        self,
        gemm: int,
        x: np.ndarray,
        weights: np.ndarray,
        grads: np.ndarray,
        target,
        sums: np.ndarray,
        total: int,
        valid: int,
    ) -> None:
        """`run` with every parameter in flat buffers (`flexflow.runtime.flat`, built with
        `flat`): the model input's tile `x`, this device's flat weights and the flat row its
        gradients are written into; the C step finds each weight at its offset."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        self._ops[0].x = ffi.from_buffer("float[]", x)
        weights, grads = _checked(weights), _checked(grads, written=True)
        labels = self._labels(target, sums, total, valid)
        self._call(
            gemm, labels, ffi.from_buffer("float[]", weights), ffi.from_buffer("float[]", grads)
        )

    def flat_labels(self, target) -> np.ndarray:
        """The labels of the tile's predictions as the C step reads them: int64, in a row
        (a copy only where `target` is not already that)."""
        labels = shaped_labels(self.prediction_shape, target)
        return np.ascontiguousarray(labels, dtype=np.int64).reshape(-1)

    def _labels(self, target, sums: np.ndarray, total: int, valid: int) -> np.ndarray:
        """Fill the loss struct; the labels in a row (`flat_labels`, whose shape is checked as
        the reference checks it)."""
        flat_labels = self.flat_labels(target)
        loss = self._loss
        loss.labels = ffi.from_buffer("long long[]", flat_labels)
        loss.valid = self.valid_predictions(valid)
        loss.total = float(total)
        loss.sums = ffi.from_buffer("double[]", sums)
        self._kept = flat_labels  # alive until the call
        return flat_labels

    def _call(self, gemm: int, labels: np.ndarray, weights, grads) -> None:
        status = lib.ff_train_step_f32(
            ffi.cast("ff_sgemm_fn", gemm), self._ops, len(self.layers), self._loss, weights, grads
        )
        self._kept = None
        if status:  # a label out of range: the reference's error names them
            checked_labels(self.prediction_shape, labels.reshape(self.prediction_shape[:-1]))
            raise ShapeError(f"native step: the C step failed with status {status}")


def _checked(array: np.ndarray, written: bool = False) -> np.ndarray:
    """`array` as the C step reads (or writes) it; a layout it cannot take is a bug upstream."""
    if array.dtype != np.float32 or not array.flags.c_contiguous:
        raise ValueError(f"native step: expected C-contiguous float32, got {array.dtype}")
    if written and not array.flags.writeable:
        raise ValueError("native step: a gradient output is read-only")
    return array


def runs_as_one_call(task: FusedTask) -> bool:
    """Whether the step task `task` runs as one C call where it runs on a CPU (the module doc),
    for counting without building the program (flexflow.launches)."""
    return blas.sgemm_address() is not None and _layers(task) is not None


def native_step(task: FusedTask, flat: FlatLayout | None = None) -> NativeStep | None:
    """The C program of a step task that can run as one (the module doc), else None; with
    `flat`, the layout of the flat buffers its parameters live in (`NativeStep.run_flat`)."""
    if blas.sgemm_address() is None:
        return None
    layers = _layers(task)
    return None if layers is None else NativeStep(task, layers, flat)
