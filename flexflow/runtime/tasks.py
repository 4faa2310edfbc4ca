"""The Legate task every SOAP task runs as: one op tile, forward or backward, on its device.

All op tiles share one registered task; its scalars say which executor, op, tile and pass.
Legate runs the task body in this process, so a registry maps the executor id to the executor
(whose graph and strategy say what the tile is). Inputs arrive as the store slices named by the
op's input and weight regions; gradients of tensors leave through ADD reductions into their
parts (`flexflow.runtime.gradients`: tasks on different devices whose regions overlap, halos or
whole inputs, add into different parts, which Legate runs at once), which the producer's
backward tasks sum.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from typing import TYPE_CHECKING

import numpy as np
from legate.core import ResourceConfig, VariantCode, get_legate_runtime
from legate.core._lib.task.task_info import TaskInfo

from flexflow.fused_run import run_fused_task, summed_parts
from flexflow.fusion import SlotKind
from flexflow.runtime.flat import FlatLayout
from flexflow.runtime.loss import loss_tile
from flexflow.runtime.native_step import SPARSE_CROSSENTROPY, NativeStep, evaluation_program
from flexflow.runtime.native_tasks import (
    register_evals_task,
    register_step_task,
    register_steps_task,
)

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor

LIBRARY_NAME = "flexflow"


class Pass(enum.IntEnum):
    FORWARD = 0
    BACKWARD = 1
    UPDATE = 2
    LOSS = 3
    STATISTICS_FORWARD = 4
    STATISTICS_BACKWARD = 5
    FEED = 6
    RUNNING_STATISTICS = 7
    FUSED_FORWARD = 8
    """A fused group's forward (flexflow.fusion); the op scalar is the group's id."""
    FUSED_BACKWARD = 9
    FUSED_FORWARD_LOSS = 10
    """The last group's forward, then the loss on its output tile (the LOSS pass's scalars)."""
    FUSED_STEP = 11
    """FUSED_FORWARD_LOSS, then the group's backward in the same task (training)."""
    FLAT_UPDATE = 12
    """The pending update alone, on one device's copy of the flat buffers (the first part of
    a step that applies it; `Executor.apply_pending`)."""


FUSED_PASSES = {
    Pass.FUSED_FORWARD: "forward",
    Pass.FUSED_FORWARD_LOSS: "forward+loss",
    Pass.FUSED_STEP: "step",
    Pass.FUSED_BACKWARD: "backward",
}
"""The passes of fused tasks and what each runs (flexflow.fused_run.FUSED_PARTS)."""
_FUSED_SCALARS = {
    Pass.FUSED_FORWARD: 2,
    Pass.FUSED_BACKWARD: 2,
    Pass.FUSED_FORWARD_LOSS: 6,
    Pass.FUSED_STEP: 7,
}
"""A fused pass's own scalars, (training, iteration[, the loss's four][, a step's pending
update]); any after them are the staged keys of the model inputs the task reads from the batch
(flexflow.runtime.feeding.Feeds.staged_inputs)."""

EXECUTORS: dict[int, Executor] = {}
"""Executors of this process by id, for the task body (Legate hands it only stores and scalars).
An executor stays here until `Executor.close()`, since its tasks may still be pending."""
EXECUTOR_IDS = itertools.count()

_REGISTERED: dict[str, tuple] = {}


def library_and_tasks():
    """The flexflow Legate library, the id of the op-tile task and the ids of the C++ step task,
    of the C++ task of several steps and of the C++ task of several evaluation batches
    (flexflow.runtime.native_tasks), registered once per process."""
    if "tile" not in _REGISTERED:
        runtime = get_legate_runtime()
        library, _ = runtime.find_or_create_library(
            LIBRARY_NAME, config=ResourceConfig(max_tasks=8, max_dyn_tasks=8)
        )
        task_id = library.get_new_task_id()
        variants = [(VariantCode.CPU, _op_tile), (VariantCode.GPU, _op_tile_gpu)]
        info = TaskInfo.from_variants(task_id, "flexflow_op_tile", variants)
        library.register_task(info)
        step = register_step_task(library, LIBRARY_NAME)
        steps = register_steps_task(library, LIBRARY_NAME)
        evals = register_evals_task(library, LIBRARY_NAME)
        _REGISTERED["tile"] = (library, task_id, step, steps, evals)
    return _REGISTERED["tile"]


def offer_task():
    """The flexflow Legate library and the id of the task that gathers every rank's strategy
    offer (flexflow.runtime.agreement), registered once per process."""
    if "offer" not in _REGISTERED:
        library = library_and_tasks()[0]
        task_id = library.get_new_task_id()
        info = TaskInfo.from_variants(task_id, "flexflow_offer", [(VariantCode.CPU, _offer)])
        library.register_task(info)
        _REGISTERED["offer"] = (library, task_id)
    return _REGISTERED["offer"]


def _offer(context) -> None:
    from flexflow.runtime.agreement import write_offer

    write_offer(int(context.scalars[0].value()), _array(context.reductions[0]))


def _array(physical) -> np.ndarray:
    """A task argument as a numpy array over its memory: through DLPack (0.6 us, against
    2.4 us for the store's array interface and 2.5 us for an inline allocation's; every task
    converts each argument, and Python in a task holds the lock other tasks wait for)."""
    store = physical.data()
    try:
        return np.from_dlpack(store)
    except (BufferError, TypeError, RuntimeError):  # a store DLPack cannot describe
        return np.asarray(store)


def task_arguments(context) -> tuple[Executor, Pass, int, int, tuple[int, ...]]:
    """The scalars every launch passes: executor id, pass, op (or parameter), task index, and
    the pass's own values (the update's step number; the loss's id, total and valid samples).
    Values that change between iterations travel as scalars, never as executor attributes,
    since a task may run after the program has issued the next iteration."""
    executor_id, which, op, index, *extra = (s.value() for s in context.scalars)
    return EXECUTORS[executor_id], Pass(which), op, index, tuple(extra)


def _op_tile(context) -> None:
    executor, which, op, index, extra = task_arguments(context)
    if index < 0 and which in FUSED_PASSES:  # a point of a concurrent launch
        # (flexflow.runtime.concurrent; an update task's index is -1 too)
        _run_point(context, executor, which, op, extra)
        return
    if which in FUSED_PASSES:  # timed per op, inside
        _run_fused(context, executor, which, op, index, extra)
        return
    begin = time.perf_counter()
    _run_tile(context, executor, which, op, index, extra)
    if executor.timeline_entries is not None:  # measured here, inside the running task
        end = time.perf_counter()
        timed = Pass.UPDATE if which == Pass.FLAT_UPDATE else which  # an update like any other
        executor.timeline_entries.append((op, index, timed, begin, end, threading.get_native_id()))


def _op_tile_gpu(context) -> None:
    """The GPU variant, which Legate picks for tasks placed on GPUs (flexflow.gpu.variant)."""
    from flexflow.gpu.variant import run_tile_gpu

    executor, which, op, index, extra = task_arguments(context)
    begin = time.perf_counter()
    run_tile_gpu(context, executor, which, op, index, extra)
    if executor.timeline_entries is not None:  # when the work was queued, not when it ended
        end = time.perf_counter()
        executor.timeline_entries.append((op, index, which, begin, end, threading.get_native_id()))


def _run_point(context, executor: Executor, which: Pass, group: int, extra) -> None:
    """Point `context.task_index` of a concurrent launch: the fused task of that index, its
    batch norms exchanging statistics with the other points (a failure stops the others'
    waiting); the loss's valid count, the batch's, made the point's share."""
    point = int(context.task_index[0])
    if which in (Pass.FUSED_FORWARD_LOSS, Pass.FUSED_STEP):
        start = executor.regions(len(executor.graph.ops) - 1)[point][0][0]
        extra = (*extra[:4], max(0, extra[4] - start), *extra[5:])
    try:
        _run_fused(context, executor, which, group, point, extra, token=True)
    except BaseException:
        executor.exchanges[group].abort()
        raise


class _CpuTiles:
    """The CPU variant's side of a fused task: numpy arrays and the ops' numpy/C tiles;
    `exchange` (a `StatisticsExchange`) sums a batch norm's partial statistics over a
    concurrent launch's points, this task being point `point`."""

    def __init__(self, exchange=None, point: int = 0) -> None:
        self.exchange, self.point = exchange, point

    def all_sum(self, partial: np.ndarray) -> np.ndarray:
        return self.exchange.all_sum(self.point, partial)

    @staticmethod
    def forward(op, sig, region, inputs, weights):
        return op.forward_tile(sig, region, inputs, weights)

    @staticmethod
    def forward_saving(op, sig, region, inputs, weights):
        return op.forward_tile_saving(sig, region, inputs, weights)

    @staticmethod
    def backward(
        op, sig, region, inputs, weights, outputs, grads, need_input_grads, into, saved=None
    ):
        return op.backward_tile_into(
            sig, region, inputs, weights, outputs, grads, need_input_grads, into, saved
        )

    def forward_with_statistics(self, op, sig, x, weights, running, into, training, exchange):
        running, into = running.reshape(2, -1), into.reshape(2, -1)  # (a point's row)
        if training and x.dtype == np.float32:  # one C call, the exchange in it
            pointer = self.exchange.pointer if exchange else None
            return op.train_forward_tile(sig, x, weights, running, into, pointer, self.point)
        if training:
            stats = op.statistics_forward(x)
            if exchange:
                stats = self.all_sum(stats)
            into[...] = op.running_update(sig, stats, running)
        else:
            stats = op.statistics_from_running(sig, running)
        return op.forward_tile_with_statistics(sig, x, weights, stats), stats

    def backward_exchanging(self, op, sig, x, weights, y, dy, stats):
        if stats is not None and x.dtype == np.float32:  # one C call, the exchange in it
            pointer = self.exchange.pointer
            return op.train_backward_tile(sig, x, weights, y, dy, stats, pointer, self.point)
        if stats is None:
            stats = self.all_sum(op.statistics_forward(x))
        grad_stats = self.all_sum(op.statistics_backward(sig, x, weights, y, dy, stats))
        return op.backward_tile_with_statistics(sig, x, weights, y, dy, stats, grad_stats)

    @staticmethod
    def write(target: np.ndarray, value) -> None:
        target[...] = value

    @staticmethod
    def add(target: np.ndarray, value) -> None:
        target[...] += value

    @staticmethod
    def accumulate(total, value):
        return total + value

    @staticmethod
    def window(value: np.ndarray, where) -> np.ndarray:
        return value[where]

    @staticmethod
    def add_window(total: np.ndarray, where, value) -> None:
        total[where] += value

    @staticmethod
    def zeros_like(value) -> np.ndarray:
        return np.zeros_like(value)

    @staticmethod
    def hold(value, dtype: str) -> np.ndarray:
        return np.asarray(value, dtype=dtype)


_CPU_TILES = _CpuTiles()
"""The backend of fused tasks that exchange nothing."""


def _run_fused(
    context, executor: Executor, which: Pass, group: int, index: int, extra, token: bool = False
) -> None:
    """A fused task on numpy arrays (flexflow.fused_run.run_fused_task); `token`: a point of a
    concurrent launch, whose last input and output are its launch token (ConcurrentLaunch)."""

    def loss_into(op, index, loss_args, prediction, stored, grad, sums) -> np.ndarray:
        return _loss_into(executor, op, index, loss_args, prediction, stored, grad, sums)

    task = executor.fused_tasks[group][index]
    inputs, outputs = (list(map(_array, a)) for a in (context.inputs, context.outputs))
    if token:
        del inputs[-1], outputs[-1]
    width = _FUSED_SCALARS[which]
    update = extra[width - 1] if which == Pass.FUSED_STEP else 0  # a pending update's number
    if update:  # first the pending update, on this device's copy of the weights
        begin = time.perf_counter()
        _apply_pending_update(executor, inputs, outputs, update)
        if executor.timeline_entries is not None:  # an update pass of no processor's own: op -1
            end = time.perf_counter()
            executor.timeline_entries.append(
                (-1, index, Pass.UPDATE, begin, end, threading.get_native_id())
            )
    keys: dict[int, int] = {}
    if (
        len(extra) > width
    ):  # model inputs read from the staged batch (flexflow.runtime.feeding.Feeds.staged_inputs)
        keys = dict(zip(executor.feeds.staged_inputs, extra[width:], strict=True))
        extra = extra[:width]
    # a backward names its weights one by one (flat parameters have no backward tasks)
    flat = executor.params.flat if which != Pass.FUSED_BACKWARD else None
    native = executor.native_steps.get((group, index)) if which == Pass.FUSED_STEP else None
    if native is not None and extra[2] == SPARSE_CROSSENTROPY:
        _run_native_step(executor, native, inputs, outputs, extra[2:6], keys, extra[1])
        return
    if which == Pass.FUSED_FORWARD_LOSS:  # an evaluation batch may run as one C call
        native = evaluation_program(executor, group, index, extra[2], bool(extra[0]))
        if native is not None:
            _run_native_eval(executor, native, inputs, outputs, extra[2:6], keys)
            return
    if keys or flat is not None:
        inputs = _forward_inputs(executor, task.forward, inputs, keys, flat)
    if flat is not None and which == Pass.FUSED_STEP:  # the flat row of partial gradients,
        pids = [slot.id for slot in task.backward.overwrites]  # after the loss row and states
        at = 1 + len(task.forward.states)  # (1-D, or a concurrent launch's (1, size) row)
        outputs[at : at + 1] = flat.split(outputs[at].reshape(-1), pids)
    run_fused_task(
        task, _tiles(executor, group, index), FUSED_PASSES[which],
        (inputs, outputs, list(map(_array, context.reductions))), extra, executor.timeline_entries,
        (Pass.FORWARD, Pass.LOSS, Pass.BACKWARD), lambda array: array, loss_into,
        executor.gradients.read_counts(group, index) if which == Pass.FUSED_BACKWARD else (),
    )  # fmt: skip


def _tiles(executor: Executor, group: int, index: int) -> _CpuTiles:
    """The tile backend of task `index` of `group`: exchanging statistics as point `index`
    where the group's launches are concurrent."""
    exchange = executor.exchanges.get(group)
    if exchange is None:
        return _CPU_TILES
    return _CpuTiles(exchange, index)


def _run_native_step(
    executor: Executor, native: NativeStep, inputs, outputs, loss_args, keys, iteration: int
) -> None:
    """A step task as one C call (flexflow.runtime.native_step), from its arguments as
    `_forward_inputs` receives them: with flat parameters (`NativeStep.flat`), this device's
    flat weights, the model input's tile unless staged (`keys`), its batch norms' running
    statistics, the target unless staged; the loss row, the running statistics after the
    step, the flat row of partial gradients (each written whole)."""
    task = native.task
    _, total, valid, key = loss_args
    states = len(task.forward.states)
    written = outputs[1 : 1 + states]  # the running statistics' outputs, in the layout's order
    begin = time.perf_counter()
    staged_target = key >= 0
    if staged_target:
        target = executor.staged_tile(key, executor.regions(task.group.ops[-1])[task.index])
    if native.flat is not None:
        arguments = iter(inputs)
        weights = next(arguments)
        tiles = []  # the model inputs' tiles, in the layout's order
        for slot, _ in native.program.inputs:
            staged = keys.get(slot.id, -1)
            tiles.append(
                executor.staged_tile(staged, slot.region) if staged >= 0 else next(arguments)
            )
        read = [next(arguments) for _ in range(states)]
        if not staged_target:
            target = next(arguments)
        running = _running(native, task.forward.states, read, written)
        sums, grads = outputs[0], outputs[1 + states]
        native.run_flat(
            executor.sgemm, tiles, weights, grads, target, sums, total, valid, iteration, running
        )
    else:  # every weight and partial gradient its own argument
        inputs = _forward_inputs(executor, task.forward, inputs, keys, None) if keys else inputs
        values = dict(zip(task.forward.inputs, inputs, strict=False))
        if not staged_target:
            target = inputs[len(task.forward.inputs)]
        read = [values[slot] for slot in task.forward.states]
        running = _running(native, task.forward.states, read, written)
        grads_into = dict(zip(task.backward.overwrites, outputs[1 + states :], strict=True))
        native.run(
            executor.sgemm, values, grads_into, target, outputs[0], total, valid, iteration,
            running,
        )  # fmt: skip
    if executor.timeline_entries is not None:  # the whole step as one entry of its last op
        end = time.perf_counter()
        op = task.group.ops[-1]
        executor.timeline_entries.append(
            (op, task.index, Pass.FUSED_STEP, begin, end, threading.get_native_id())
        )


def _run_native_eval(
    executor: Executor, native: NativeStep, inputs, outputs, loss_args, keys
) -> None:
    """An evaluation batch's forward and loss as one C call (`NativeStep.evaluate`), from the
    arguments of a forward+loss task (`flexflow.fused_run.run_fused_task`): the layout's inputs
    (with flat parameters this device's flat weights first), the target unless staged; the
    model output's tile (`flexflow.runtime.native_step.evaluated_outputs`: outside training
    nothing reads the activations before it), the loss gradient, the loss row."""
    task = native.task
    _, total, valid, key = loss_args
    begin = time.perf_counter()
    flat = executor.params.flat
    flat_weights = inputs[0].reshape(-1) if flat is not None else None
    arrays = _forward_inputs(executor, task.forward, inputs, keys, flat)
    n_in = len(task.forward.inputs)
    values = dict(zip(task.forward.inputs, arrays[:n_in], strict=True))
    if key >= 0:
        target = executor.staged_tile(key, executor.regions(task.group.ops[-1])[task.index])
    else:
        target = arrays[n_in]
    running = [values[slot].reshape(2, -1) for _, slot in native.norms]
    output, grad, sums = outputs  # the output's tile alone (`evaluated_outputs`)
    prediction, gradient = native.evaluate(
        executor.sgemm, values, target, sums, total, valid, running, flat_weights
    )
    output[...] = prediction.reshape(output.shape)
    grad[...] = gradient.reshape(grad.shape)
    if executor.timeline_entries is not None:  # the whole pass as one entry of its last op
        end = time.perf_counter()
        op = task.group.ops[-1]
        executor.timeline_entries.append(
            (op, task.index, Pass.FUSED_FORWARD_LOSS, begin, end, threading.get_native_id())
        )


def _running(native: NativeStep, states, read: list, written: list) -> list:
    """Per batch norm of the program (`NativeStep.norms`), its running statistics and where
    they go, as (2, C) rows (a concurrent launch's point has a (1, 2, C) row)."""
    by_slot = {slot: (now, into) for slot, now, into in zip(states, read, written, strict=True)}
    rows = []
    for _, slot in native.norms:
        now, into = by_slot[slot]
        if not into.flags.c_contiguous:  # a reshaped copy would take the statistics
            raise ValueError("native step: a running statistics output is not contiguous")
        rows.append((now.reshape(2, -1), into.reshape(2, -1)))
    return rows


def _forward_inputs(
    executor: Executor, layout, arguments: list, keys: dict[int, int], flat: FlatLayout | None
) -> list:
    """The arrays of a fused forward's input slots, then the arguments after them: from the
    task's arguments, except model inputs staged under `keys` (tensor id -> staged key, -1
    when fed to a store) and, with `flat` parameters, the weights, split from the flat copy
    that comes first (`Executor._add_forward_inputs`)."""
    arguments = iter(arguments)
    weights = {}
    if flat is not None:
        pids = [slot.id for slot in layout.inputs if slot.kind is SlotKind.WEIGHT]
        weights = dict(zip(pids, flat.split(next(arguments).reshape(-1), pids), strict=True))
    arrays = []
    for slot in layout.inputs:
        if slot.kind is SlotKind.WEIGHT and flat is not None:
            arrays.append(weights[slot.id])
        elif slot.kind is SlotKind.TENSOR and keys.get(slot.id, -1) >= 0:
            arrays.append(executor.staged_tile(keys[slot.id], slot.region))
        else:
            arrays.append(next(arguments))
    return arrays + list(arguments)


def _apply_pending_update(executor: Executor, inputs: list, outputs: list, update: int) -> None:
    """Update number `update` of this device's replica of the flat buffers
    (Executor.updates_in_step), from the arguments at the end of `inputs` (every device's
    partial gradients, the states) and `outputs` (the replica, its states), which it removes;
    the flat buffer updates as one weight (the optimizer is elementwise)."""
    if executor.params.flat is None:  # a model without weights: nothing was passed
        return
    states = len(executor.optimizer.state_names)
    count = len(executor.params.devices) + states
    read = [row.reshape(-1) for row in inputs[-count:]]  # (a concurrent launch's are 2-D)
    written = [row.reshape(-1) for row in outputs[-(1 + states) :]]
    del inputs[-count:], outputs[-(1 + states) :]
    weight, *state_rows = written
    executor.optimizer.apply_partials(weight, read[: count - states], state_rows, update)


def _loss_into(
    executor: Executor,
    op: int,
    index: int,
    loss_args,
    prediction: np.ndarray,
    stored_target: np.ndarray | None,
    grad: np.ndarray | None,
    sums: np.ndarray,
) -> np.ndarray:
    """Tile `index` of output op `op`: the loss gradient (returned, and written into `grad`
    unless None), (loss, correct) into `sums` (this task's row); the target is staged in this
    process (key >= 0) or `stored_target`."""
    loss_id, total, valid, key = loss_args
    if key >= 0:
        target = executor.staged_tile(key, executor.regions(op)[index])
    else:
        target = stored_target
    value, gradient, correct = loss_tile(loss_id, prediction, target, total, valid)
    gradient = np.asarray(gradient, dtype=np.float32)  # as the gradient's store holds it
    if grad is not None:
        grad[...] = gradient
    sums[...] = (value, correct)
    return gradient


def _run_tile(context, executor: Executor, which: Pass, op: int, index: int, extra) -> None:
    if which == Pass.FEED:  # one shard of a model input, copied in on the device that reads it
        if extra:  # from the batch staged in this process
            shard = executor.staged_tile(extra[0], executor.input_shard(op, index))
        else:
            shard = _array(context.inputs[0])
        _array(context.outputs[0])[...] = shard
        return
    if which == Pass.FLAT_UPDATE:  # every argument one flat row (Executor.apply_pending)
        inputs, outputs = list(map(_array, context.inputs)), list(map(_array, context.outputs))
        _apply_pending_update(executor, inputs, outputs, extra[0])
        return
    if which == Pass.UPDATE:  # the weight tiles of one device, and their optimizer states
        # each piece's weight and states are inputs and outputs (read-write): updated in place
        # through the outputs; of the inputs, only the partial gradients are read
        inputs, outputs = iter(context.inputs), iter(context.outputs)
        states = len(executor.optimizer.state_names)
        for pid, _ in executor.update_groups[op]:
            next(inputs)  # the weight tile, read through its output
            rows = [_array(next(inputs))[0] for _ in executor.contributors[pid]]
            for _ in range(states):
                next(inputs)
            weight, *state_tiles = (_array(next(outputs)) for _ in range(1 + states))
            executor.optimizer.apply_partials(weight, rows, state_tiles, extra[0])
        return
    if which == Pass.LOSS:  # this tile's share of the loss and its tile of the loss gradient
        stored = _array(context.inputs[1]) if len(context.inputs) > 1 else None
        _loss_into(
            executor, op, index, extra, _array(context.inputs[0]), stored,
            _array(context.outputs[0]), _array(context.outputs[1]),
        )  # fmt: skip
        return
    node = executor.graph.ops[op]
    if which == Pass.RUNNING_STATISTICS:  # batch norm's running mean and variance
        arrays = [_array(a) for a in context.inputs]
        if extra[0]:  # training: fold this batch's statistics (the tasks' rows) into them
            value = node.op.running_update(node.sig, arrays[0].sum(axis=0), arrays[1])
            _array(context.outputs[0])[...] = value
        else:  # evaluation: the statistics' first row from the running ones, the others 0
            rows = _array(context.outputs[0])
            rows[...] = 0.0
            rows[0] = node.op.statistics_from_running(node.sig, arrays[0])
        return
    # the forward and backward passes of an op with batch statistics (batch norm), which never
    # joins a fused group (flexflow.fusion); every other op runs in `_run_fused`
    arrays = [_array(a) for a in context.inputs]
    n_in, n_w, n_out = len(node.inputs), len(node.weights), len(node.sig.outputs)
    if which in (Pass.BACKWARD, Pass.STATISTICS_BACKWARD):  # its gradients' parts, summed
        arrays = summed_parts(
            arrays, executor.gradients.alone_read_counts(op, index), _CPU_TILES.accumulate
        )
    if which == Pass.STATISTICS_FORWARD:  # this task's row of the statistics
        _array(context.outputs[0])[0] = node.op.statistics_forward(arrays[0])
        return
    inputs, weights = arrays[:n_in], arrays[n_in : n_in + n_w]
    rest = arrays[n_in + n_w :]
    if which == Pass.FORWARD:  # (the statistics: every task's row of this tile's channels)
        stats = rest[0].sum(axis=0)
        outputs = node.op.forward_tile_with_statistics(node.sig, inputs[0], weights, stats)
        for target, value in zip(context.outputs, outputs, strict=True):
            _array(target)[...] = value
        return
    outputs, grad_outputs, stats = rest[:n_out], rest[n_out : 2 * n_out], rest[2 * n_out :]
    summed = [rows.sum(axis=0) for rows in stats[:2]]  # the statistics' rows (forward, backward)
    if which == Pass.STATISTICS_BACKWARD:  # this task's row of the backward's statistics
        partial = node.op.statistics_backward(
            node.sig, inputs[0], weights, outputs[0], grad_outputs[0], summed[0]
        )
        _array(context.outputs[0])[0] = partial
        return
    grad_inputs, grad_weights = node.op.backward_tile_with_statistics(
        node.sig, inputs[0], weights, outputs[0], grad_outputs[0], summed[0], summed[1]
    )
    reductions = iter(context.reductions)
    for grad, spec in zip(grad_inputs, node.sig.inputs, strict=True):
        if spec.dtype.is_float:
            _array(next(reductions))[...] += grad
    # this device's partial weight gradients: read after the statistics, written as outputs
    for grad, current, target in zip(grad_weights, stats[2:], context.outputs, strict=True):
        _array(target)[...] = current + grad
