"""A fused training step as one C call (native/step.c): the forward, loss and backward of a
step task whose ops all have C kernels, so the task holds the interpreter lock only to name its
arrays.

Why: Legate runs every processor's task bodies in this one Python process. Python between a
task's kernels holds the lock the other processors' tasks wait for, and runs 2-3x slower there
than alone: with the MLP's step tasks on two CPUs, each 100 us of Python added to a task added
0.1-0.2 ms to an iteration, and an RNN language model's data-parallel step (16 LSTM steps)
took longer on two CPUs than on one. Which steps run so, and the program of ops they run, is
flexflow.runtime.step_program's; any other step runs op by op (flexflow.fused_run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from flexflow._kernels import ffi, lib
from flexflow.errors import ShapeError
from flexflow.fusion import FusedTask, Slot
from flexflow.ops import blas
from flexflow.ops.base import region_shape
from flexflow.ops.native_norms import EXCHANGE_TIMEOUT_S, exchange_failed
from flexflow.ops.native_updates import L2Runs
from flexflow.runtime.flat import FlatLayout
from flexflow.runtime.loss import (
    LOSS_IDS,
    checked_labels,
    predictions_per_sample,
    shaped_labels,
)
from flexflow.runtime.step_program import ADD, PART, Program, ProgramOp, program, why_not

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor
    from flexflow.runtime.statistics_exchange import StatisticsExchange

SPARSE_CROSSENTROPY = LOSS_IDS.index("sparse_categorical_crossentropy")
"""The loss a native step computes (a step under another loss runs op by op)."""
LOG_UPDATE, LOG_STEP, LOG_OPS = lib.FF_LOG_UPDATE, lib.FF_LOG_STEP, lib.FF_LOG_OPS
LOG_CAPACITY = 1 << 18
"""Log entries a recording step keeps until they are taken: each step logs 2 per op and 1 for
the loss and for itself (8 MiB per step task, and as much for the copy `take_log` reads)."""


class NativeStep:
    """A step task's C program: its ops' structs and the buffers they read and write (every
    tensor's value and gradient, scratch), made once and reused every iteration: a processor
    runs one task at a time, and a program serves one task. `run` names the iteration's
    arrays and calls it."""

    def __init__(
        self,
        task: FusedTask,
        made: Program,
        flat: FlatLayout | None = None,
        exchange: StatisticsExchange | None = None,
    ) -> None:
        self.task, self.program, self.flat = task, made, flat
        self._exchange = exchange  # alive while the structs point at it
        self.norms = tuple(
            (i, op.step.running)
            for i, op in enumerate(made.ops)
            if op.kind == lib.FF_STEP_BATCH_NORM
        )
        """(op position, its running statistics' slot) of each batch norm: the running
        statistics each call reads and writes (`run`'s `running`)."""
        self._dtypes = tuple(made.dtype(which) for which in range(len(made.inputs)))
        self.prediction_shape = region_shape(task.output_slot.region)
        self._ops = ffi.new("ff_step_op[]", len(made.ops))
        self._loss = ffi.new("ff_step_loss *")
        self._kept: np.ndarray | None = None  # the labels the loss struct points at
        self._plan = ffi.new("ff_step_plan *")
        """What the C++ step task's body runs (flexflow.runtime.native_tasks)."""
        self._plan.gemm = ffi.cast("ff_sgemm_fn", blas.sgemm_address() or 0)
        self._plan.ops, self._plan.count, self._plan.loss = self._ops, len(made.ops), self._loss
        self._plan.log = ffi.NULL
        self._readers = ffi.new("long[]", [op for _, op in made.inputs])
        self._plan.inputs, self._plan.num_inputs = self._readers, len(made.inputs)
        self._l2 = None if flat is None else L2Runs.of(flat.runs)
        """The flat weights' L2 regularizers, which the plan's update adds (none: NULL)."""
        self._plan.l2 = ffi.NULL if self._l2 is None else self._l2.struct
        self.buffers: list[np.ndarray] = []
        """The arrays the structs point at."""
        self._held: list = []  # the cffi arrays of pointers the structs point at
        self._model_inputs = {slot.id for slot, _ in made.inputs}
        self._values: dict[int, np.ndarray] = {}  # tensor id -> its value in this task
        self._grads: dict[int, np.ndarray] = {}  # ... its gradient (zeros where nothing reads it)
        values, grads = self._values, self._grads
        for op in made.ops:
            for tid, _, slot in op.step.outputs:
                values[tid] = self._array(region_shape(slot.region))
                grads[tid] = self._array(region_shape(slot.region))
        for i, op in enumerate(made.ops):
            self._wire(self._ops[i], op, values, grads)
            if op.kind == lib.FF_STEP_BATCH_NORM:
                self._wire_batch_norm(self._ops[i], op, exchange)

    def _wire(self, c, op: ProgramOp, values: dict, grads: dict) -> None:
        """Fill the struct `c` of `op`: sizes, the buffers it reads and writes, its scratch."""
        c.kind, c.act, c.eps = op.kind, op.act, op.eps
        c.m, c.n, c.k, c.p = op.dims
        c.ldx = op.ldx
        step = op.step
        for j in range(lib.FF_STEP_WEIGHTS):
            c.w_at[j] = c.dw_at[j] = -1
        for j, (tid, _, _) in enumerate(step.outputs):
            c.y[j], c.dy[j] = _pointer(values[tid]), _pointer(grads[tid])
        if op.attention:
            dims = c.att
            (dims.n, dims.lq, dims.lk, dims.eq, dims.ek, dims.ev, dims.e, dims.heads) = op.attention
            c.scratch = _pointer(
                self._array((int(lib.ff_attention_scratch(ffi.addressof(c, "att"))),))
            )
        if op.kind == lib.FF_STEP_DROPOUT:
            c.rate, c.seed, c.base = op.dropout
        if op.window:
            win = c.win
            (win.n, win.c, win.h, win.w, win.o, win.oh, win.ow, win.kh, win.kw, win.sh, win.sw,
             win.ph, win.pw, win.is_max) = op.window  # fmt: skip
            if op.kind == lib.FF_STEP_CONV:
                c.scratch = _pointer(
                    self._array((int(lib.ff_conv_scratch(ffi.addressof(c, "win"))),))
                )
        shapes = [region_shape(slot.region) for _, slot in step.inputs]
        if op.kind in (lib.FF_STEP_STACK, lib.FF_STEP_CONCAT):
            parts = ffi.new("const float *[]", [_pointer(values[t]) for t in op.reads])
            dparts = ffi.new("float *[]", [_pointer(grads[t]) for t in op.reads])
            adds = ffi.new("int[]", [int(mode == ADD) for mode in op.grads])
            self._held += [parts, dparts, adds]
            c.parts, c.dparts, c.dparts_add, c.count = parts, dparts, adds, len(op.reads)
            if op.part_floats:
                c.part_n = lengths = ffi.new("long[]", op.part_floats)
                self._held.append(lengths)
        else:
            for j, (tensor, mode) in enumerate(zip(op.reads, op.grads, strict=True)):
                if tensor in self._model_inputs:
                    continue  # the call's input tile (`run`)
                c.x[j] = _pointer(values[tensor], op.offset if j == 0 else 0)
                if mode is None:
                    continue
                c.dx[j] = _pointer(grads[tensor], op.offset if j == 0 else 0)
                c.dx_add[j] = int(mode in (ADD, PART))  # a part adds into zeros
                if mode == ADD or (j == 0 and op.kind == lib.FF_STEP_LSTM):
                    # computed here first (an LSTM's input: it may be a time step's part)
                    c.tmp_x[j] = _pointer(self._array(_read_shape(op, shapes[j])))
        if op.zeroes is not None:
            c.zero, c.zero_n = _pointer(grads[op.zeroes]), grads[op.zeroes].size
        m, n = op.dims[0], op.dims[1]
        if op.kind == lib.FF_STEP_DENSE and op.act != lib.FF_ACT_NONE:
            c.z = _pointer(self._array((m, n)))  # the pre-activation, then its gradient
            if op.act == lib.FF_ACT_GELU:
                c.dz = _pointer(self._array((m, n)))  # its inner tanh
        if op.kind == lib.FF_STEP_LAYER_NORM:  # x_hat; the sums' 2 n doubles, then rstd
            c.z, c.scratch = _pointer(self._array((m, n))), _pointer(self._array((4 * n + m,)))
        if op.kind == lib.FF_STEP_LSTM:
            c.z, c.dz = _pointer(self._array((m, 4 * n))), _pointer(self._array((m, 4 * n)))
        for j, (slot, add) in enumerate(zip(step.weights, op.weight_adds, strict=True)):
            shape = region_shape(slot.region)
            c.w_n[j] = int(np.prod(shape, dtype=np.int64))
            if add:
                c.dw_add[j], c.tmp_w[j] = 1, _pointer(self._array(shape))
            if self.flat is not None:  # where its weights sit in flat buffers
                c.w_at[j] = c.dw_at[j] = self.flat.ranges[slot.id][0]

    @property
    def in_cpp_body(self) -> bool:
        """Whether a C++ task body (flexflow.runtime.native_tasks) can run this step: flat
        parameters, and no batch norm (the bodies take no running statistics)."""
        return self.flat is not None and not self.program.reads_running

    def _wire_batch_norm(self, c, op: ProgramOp, exchange: StatisticsExchange | None) -> None:
        """A batch norm's scalars, the batch's sums its backward reads, and the exchange its
        tile's statistics go through (as point `task.index`) where its launch has one."""
        c.batch_count, c.momentum, c.timeout_s = op.count, op.momentum, EXCHANGE_TIMEOUT_S
        stats = np.zeros(2 * op.dims[1], dtype=np.float64)
        self.buffers.append(stats)
        c.stats = ffi.cast("double *", ffi.from_buffer(stats))
        if op.step.exchange:
            if exchange is None:
                raise AssertionError(f"{op.step.node.name}: its tiles exchange, but no exchange")
            c.exchange, c.point = ffi.cast("ff_exchange *", exchange.pointer), self.task.index

    def _array(self, shape: tuple[int, ...]) -> np.ndarray:
        array = np.zeros(shape, dtype=np.float32)
        self.buffers.append(array)
        return array

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
        """(entries, 4): begin s, end s, thread id, what (LOG_UPDATE, LOG_STEP, or an op's pass
        inside a step: `op_pass`) of every call logged since the last take (none unless
        `record` was called)."""
        if self._plan.log == ffi.NULL:
            return np.zeros((0, 4))
        count = lib.ff_step_log_take(self._log, ffi.cast("double *", ffi.from_buffer(self._taken)))
        return self._taken[:count].copy()

    def op_pass(self, what: int) -> tuple[int, str]:
        """The graph op and pass ("forward", "backward" or "loss", the loss as the last op's) of
        a log entry inside a step (what >= LOG_OPS)."""
        position, backward = divmod(int(what) - LOG_OPS, 2)
        ops = self.program.ops
        if position == len(ops):
            return ops[-1].step.node.id, "loss"
        return ops[position].step.node.id, "backward" if backward else "forward"

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

    def input_array(self, tile, which: int = 0) -> np.ndarray:
        """Model input `which`'s tile as the program reads it: C-contiguous, of its dtype
        (`Program.dtype`; a copy only where it is not already that)."""
        return np.ascontiguousarray(tile, dtype=self._dtypes[which])

    def run(
        self,
        gemm: int,
        values: Mapping[Slot, np.ndarray],
        grads_into: Mapping[Slot, np.ndarray],
        target,
        sums: np.ndarray,
        total: int,
        valid: int,
        iteration: int = 0,
        running: Sequence[tuple[np.ndarray, np.ndarray]] = (),
    ) -> None:
        """One step through the sgemm at `gemm`: `values` maps the task's forward input slots
        to arrays (the model inputs' tiles, the weights), `grads_into` its weight gradient
        slots to the arrays they are written into (all C-contiguous float32); the labels
        `target` of the first `valid` samples count; (loss / total, correct) go into `sums`;
        `iteration`: the training step's number, which dropout's masks are drawn for;
        `running`: per batch norm (`norms`), the (2, C) float64 running statistics it reads
        and the array it writes them into."""
        ops = self._ops
        tiles = self._name_inputs([values[slot] for slot, _ in self.program.inputs])
        arrays = list(tiles) + self._name_running(running)  # alive until the call returns
        for i, op in enumerate(self.program.ops):
            step = op.step
            for j, (weight, grad) in enumerate(zip(step.weights, step.weight_grads, strict=True)):
                named = _checked(values[weight]), _checked(grads_into[grad], written=True)
                arrays += named
                ops[i].w[j], ops[i].dw[j] = (ffi.from_buffer("float[]", a) for a in named)
        labels = self._labels(target, sums, total, valid)
        self._call(gemm, labels, ffi.NULL, ffi.NULL, arrays, iteration)

    def evaluate(
        self,
        gemm: int,
        values: Mapping[Slot, np.ndarray],
        target,
        sums: np.ndarray,
        total: int,
        valid: int,
        running: Sequence[np.ndarray] = (),
        flat_weights: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The forward pass outside training and the loss, as one C call (native/step.c
        `ff_eval_step_f32`: dropouts pass their input on, batch norms normalize with their
        running statistics): `values` maps the task's forward input slots to arrays (the model
        inputs' tiles and, unless `flat_weights` holds every weight, the weights); `running`:
        per batch norm (`norms`) its (2, C) float64 running statistics, only read; (loss /
        total, correct) go into `sums`. Returns the output tile's value and the loss's gradient
        (buffers of this program, overwritten by its next call)."""
        tiles = self._name_inputs([values[slot] for slot, _ in self.program.inputs])
        arrays = list(tiles)  # alive until the call returns
        for (position, _), now in zip(self.norms, running, strict=True):
            arrays.append(_checked(now, dtype=np.float64))
            self._ops[position].running = ffi.cast("double *", ffi.from_buffer(arrays[-1]))
        weights = ffi.NULL
        if flat_weights is not None:
            arrays.append(_checked(flat_weights))
            weights = ffi.from_buffer("float[]", arrays[-1])
        else:
            for i, op in enumerate(self.program.ops):
                for j, slot in enumerate(op.step.weights):
                    arrays.append(_checked(values[slot]))
                    self._ops[i].w[j] = ffi.from_buffer("float[]", arrays[-1])
        labels = self._labels(target, sums, total, valid)
        status = lib.ff_eval_step_f32(
            ffi.cast("ff_sgemm_fn", gemm), self._ops, len(self.program.ops), self._loss, weights
        )
        self._kept = None
        self._check(status, arrays, labels)
        output = self.task.output_slot.id
        return self._values[output], self._grads[output]

    def run_flat(
        self,
        gemm: int,
        inputs: Sequence[np.ndarray],
        weights: np.ndarray,
        grads: np.ndarray,
        target,
        sums: np.ndarray,
        total: int,
        valid: int,
        iteration: int = 0,
        running: Sequence[tuple[np.ndarray, np.ndarray]] = (),
    ) -> None:
        """`run` with every parameter in flat buffers (`flexflow.runtime.flat`, built with
        `flat`): the model inputs' tiles in the program's order (`Program.inputs`), this
        device's flat weights and the flat row its gradients are written into; the C step finds
        each weight at its offset."""
        tiles = self._name_inputs(inputs)
        weights, grads = _checked(weights), _checked(grads, written=True)
        arrays = tiles + self._name_running(running)
        labels = self._labels(target, sums, total, valid)
        self._call(
            gemm, labels, ffi.from_buffer("float[]", weights), ffi.from_buffer("float[]", grads),
            arrays, iteration,
        )  # fmt: skip

    def _name_running(self, running: Sequence[tuple[np.ndarray, np.ndarray]]) -> list:
        """Point each batch norm at its running statistics and where it writes them."""
        if len(running) != len(self.norms):
            raise ValueError(f"native step: {len(self.norms)} batch norms, {len(running)} given")
        arrays = []
        for (position, _), (now, into) in zip(self.norms, running, strict=True):
            now, into = _checked(now, dtype=np.float64), _checked(into, True, np.float64)
            self._ops[position].running = ffi.cast("double *", ffi.from_buffer(now))
            self._ops[position].running_out = ffi.cast("double *", ffi.from_buffer(into))
            arrays += [now, into]
        return arrays

    def _name_inputs(self, tiles: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Point each reader of a model input at its tile (as `input_array` gives it)."""
        named = [self.input_array(tile, which) for which, tile in enumerate(tiles)]
        for (_, op), tile in zip(self.program.inputs, named, strict=True):
            self._ops[op].x[0] = ffi.from_buffer(tile)
        return named

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

    def _call(
        self, gemm: int, labels: np.ndarray, weights, grads, arrays: list, iteration: int
    ) -> None:
        """The step; `arrays`: the model inputs' tiles first, then what else the structs
        point at for this call (kept alive until it returns)."""
        status = lib.ff_train_step_f32(
            ffi.cast("ff_sgemm_fn", gemm), self._ops, len(self.program.ops), self._loss, weights,
            grads, iteration, self._plan.log,
        )  # fmt: skip
        self._kept = None
        self._check(status, arrays, labels)

    def _check(self, status: int, arrays: list, labels: np.ndarray) -> None:
        """Raise the error a C step's nonzero `status` stands for, as the op-by-op step would
        have raised it; `arrays`: the call's, the model inputs' tiles first."""
        if lib.FF_STEP_EXCHANGE + lib.FF_EXCHANGE_NO_MEMORY <= status <= lib.FF_STEP_EXCHANGE - 1:
            raise exchange_failed(status - lib.FF_STEP_EXCHANGE)
        if status == lib.FF_STEP_BAD_ID:  # the reference's error names the ids
            tiles = arrays[: len(self.program.inputs)]
            for (_, op), tile in zip(self.program.inputs, tiles, strict=True):
                if self.program.ops[op].kind == lib.FF_STEP_EMBEDDING:
                    self.program.ops[op].step.node.op.check_ids(tile)
        if status:  # a label out of range: the reference's error names them
            checked_labels(self.prediction_shape, labels.reshape(self.prediction_shape[:-1]))
            raise ShapeError(f"native step: the C step failed with status {status}")


def evaluation_program(
    executor: Executor, group: int, index: int, loss_id: int, training: bool
) -> NativeStep | None:
    """The C program that task `index` of the last group `group` runs an evaluation batch's
    forward pass and loss as (`NativeStep.evaluate`): its training step's, outside training
    under sparse cross-entropy; None: they run op by op."""
    if training or loss_id != SPARSE_CROSSENTROPY:
        return None
    return executor.native_steps.get((group, index))


def evaluated_outputs(
    executor: Executor, group: int, index: int, loss_id: int, training: bool
) -> tuple:
    """The forward outputs a forward+loss task of the last group writes to their stores: every
    one, or, as one C call (`evaluation_program`), the model output's tile alone (nothing
    reads the others outside training; each is a store argument less for Legate)."""
    task = executor.fused_tasks[group][index]
    if evaluation_program(executor, group, index, loss_id, training) is None:
        return task.forward.outputs
    return (task.output_slot,)


def _checked(array: np.ndarray, written: bool = False, dtype=np.float32) -> np.ndarray:
    """`array` as the C step reads (or writes) it; a layout it cannot take is a bug upstream."""
    if array.dtype != dtype or not array.flags.c_contiguous:
        raise ValueError(f"native step: expected C-contiguous {np.dtype(dtype)}, got {array.dtype}")
    if written and not array.flags.writeable:
        raise ValueError("native step: a gradient output is read-only")
    return array


def runs_in_cpp_body(task: FusedTask) -> bool:
    """Whether the step task `task` runs as one C call where it runs on a CPU (the module doc)
    that a C++ task body can make (no batch norm: the bodies take no running statistics), for
    counting without building its buffers (flexflow.launches)."""
    if blas.sgemm_address() is None:
        return False
    made = program(task)
    return made is not None and not made.reads_running


def native_step(
    task: FusedTask, flat: FlatLayout | None = None, exchange: StatisticsExchange | None = None
) -> NativeStep | None:
    """The C program of a step task that can run as one (the module doc), else None; with
    `flat`, the layout of the flat buffers its parameters live in (`NativeStep.run_flat`);
    `exchange`: its concurrent launch's, where its batch norms exchange statistics."""
    if blas.sgemm_address() is None:
        return None
    made = program(task)
    return None if made is None else NativeStep(task, made, flat, exchange)


def native_steps_of(
    tasks: Sequence[FusedTask],
    kinds: Sequence[str],
    flat: FlatLayout | None,
    exchange: StatisticsExchange | None,
    record: bool = False,
) -> tuple[dict[int, NativeStep], str | None]:
    """The C programs of a group's step tasks (`tasks`, on devices of `kinds`) that run as one
    call, by task index (`native_step`; each logging its calls with `record`), and why the
    first CPU task that does not cannot (None where all can). GPU tasks run their own kernels."""
    programs: dict[int, NativeStep] = {}
    note = None
    for task, kind in zip(tasks, kinds, strict=True):
        if kind != "cpu":
            continue
        program = native_step(task, flat, exchange)
        if program is not None:
            programs[task.index] = program
            if record:
                program.record()
        elif note is None:
            note = "MKL is not installed" if blas.sgemm_address() is None else why_not(task)
    return programs, note


def _pointer(array: np.ndarray, offset: int = 0):
    """A float pointer `offset` elements into `array` (one of the program's buffers)."""
    return ffi.cast("float *", ffi.from_buffer(array)) + offset


def _read_shape(op: ProgramOp, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the gradient an op computes for an input read as `shape`: an LSTM's
    time step of a sequence is (samples, features)."""
    if op.kind == lib.FF_STEP_LSTM and len(shape) == 3:
        return (shape[0], shape[2])
    return shape
