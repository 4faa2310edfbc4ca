"""The op-tile task's passes outside fused groups, on the CPU: a model input's feed, the
optimizer's updates, the loss in its own tasks, and an op with batch statistics (batch norm),
which never joins a fused group (`flexflow.fusion`): its statistics, running statistics,
forward and backward. The loss on a tile and the pending update serve fused steps too
(`flexflow.runtime.fused_body`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from flexflow.fused_run import summed_parts
from flexflow.runtime.cpu_tiles import CPU_TILES
from flexflow.runtime.loss import loss_tile
from flexflow.runtime.passes import Pass
from flexflow.runtime.task_context import array_of

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def apply_pending_update(executor: Executor, inputs: list, outputs: list, update: int) -> None:
    """Update number `update` of this device's replica of the flat buffers
    (Executor.updates_in_step), from the arguments at the end of `inputs` (every device's
    partial gradients, the states) and `outputs` (the replica, its states), which it removes;
    the flat buffer updates as one weight (the optimizer is elementwise), run by run of
    parameters with the same L2 regularizer (`FlatLayout.runs`)."""
    flat = executor.params.flat
    if flat is None:  # a model without weights: nothing was passed
        return
    states = len(executor.optimizer.state_names)
    count = len(executor.params.devices) + states
    read = [row.reshape(-1) for row in inputs[-count:]]  # (a concurrent launch's are 2-D)
    written = [row.reshape(-1) for row in outputs[-(1 + states) :]]
    del inputs[-count:], outputs[-(1 + states) :]
    weight, *state_rows = written
    partials = read[: count - states]
    # one pass of C over the runs (a call per run cost 2.8 ms against 0.5 for 200 runs)
    executor.optimizer.apply_partials(weight, partials, state_rows, update, flat.runs)


def loss_into(
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


def run_unfused(context, executor: Executor, which: Pass, op: int, index: int, extra) -> None:
    if which == Pass.FEED:  # one shard of a model input, copied in on the device that reads it
        if extra:  # from the batch staged in this process
            shard = executor.staged_tile(extra[0], executor.input_shard(op, index))
        else:
            shard = array_of(context.inputs[0])
        array_of(context.outputs[0])[...] = shard
        return
    if which == Pass.FLAT_UPDATE:  # every argument one flat row (Executor.apply_pending)
        inputs, outputs = list(map(array_of, context.inputs)), list(map(array_of, context.outputs))
        apply_pending_update(executor, inputs, outputs, extra[0])
        return
    if which == Pass.UPDATE:  # the weight tiles of one device, and their optimizer states
        # each piece's weight and states are inputs and outputs (read-write): updated in place
        # through the outputs; of the inputs, only the partial gradients are read
        inputs, outputs = iter(context.inputs), iter(context.outputs)
        states = len(executor.optimizer.state_names)
        for pid, _ in executor.update_groups[op]:
            next(inputs)  # the weight tile, read through its output
            rows = [array_of(next(inputs))[0] for _ in executor.contributors[pid]]
            for _ in range(states):
                next(inputs)
            weight, *state_tiles = (array_of(next(outputs)) for _ in range(1 + states))
            l2 = executor.graph.parameters[pid].l2  # its L2 regularizer's lambda
            executor.optimizer.apply_partials(weight, rows, state_tiles, extra[0], l2)
        return
    if which == Pass.LOSS:  # this tile's share of the loss and its tile of the loss gradient
        stored = array_of(context.inputs[1]) if len(context.inputs) > 1 else None
        loss_into(
            executor, op, index, extra, array_of(context.inputs[0]), stored,
            array_of(context.outputs[0]), array_of(context.outputs[1]),
        )  # fmt: skip
        return
    node = executor.graph.ops[op]
    if which == Pass.RUNNING_STATISTICS:  # batch norm's running mean and variance
        arrays = [array_of(a) for a in context.inputs]
        if extra[0]:  # training: fold this batch's statistics (the tasks' rows) into them
            value = node.op.running_update(node.sig, arrays[0].sum(axis=0), arrays[1])
            array_of(context.outputs[0])[...] = value
        else:  # evaluation: the statistics' first row from the running ones, the others 0
            rows = array_of(context.outputs[0])
            rows[...] = 0.0
            rows[0] = node.op.statistics_from_running(node.sig, arrays[0])
        return
    # the forward and backward passes of an op with batch statistics (batch norm), which never
    # joins a fused group (flexflow.fusion); every other op runs in `fused_body.run_fused`
    arrays = [array_of(a) for a in context.inputs]
    n_in, n_w, n_out = len(node.inputs), len(node.weights), len(node.sig.outputs)
    if which in (Pass.BACKWARD, Pass.STATISTICS_BACKWARD):  # its gradients' parts, summed
        arrays = summed_parts(
            arrays, executor.gradients.alone_read_counts(op, index), CPU_TILES.accumulate
        )
    if which == Pass.STATISTICS_FORWARD:  # this task's row of the statistics
        array_of(context.outputs[0])[0] = node.op.statistics_forward(arrays[0])
        return
    inputs, weights = arrays[:n_in], arrays[n_in : n_in + n_w]
    rest = arrays[n_in + n_w :]
    if which == Pass.FORWARD:  # (the statistics: every task's row of this tile's channels)
        stats = rest[0].sum(axis=0)
        outputs = node.op.forward_tile_with_statistics(node.sig, inputs[0], weights, stats)
        for target, value in zip(context.outputs, outputs, strict=True):
            array_of(target)[...] = value
        return
    outputs, grad_outputs, stats = rest[:n_out], rest[n_out : 2 * n_out], rest[2 * n_out :]
    summed = [rows.sum(axis=0) for rows in stats[:2]]  # the statistics' rows (forward, backward)
    if which == Pass.STATISTICS_BACKWARD:  # this task's row of the backward's statistics
        partial = node.op.statistics_backward(
            node.sig, inputs[0], weights, outputs[0], grad_outputs[0], summed[0]
        )
        array_of(context.outputs[0])[0] = partial
        return
    grad_inputs, grad_weights = node.op.backward_tile_with_statistics(
        node.sig, inputs[0], weights, outputs[0], grad_outputs[0], summed[0], summed[1]
    )
    reductions = iter(context.reductions)
    for grad, spec in zip(grad_inputs, node.sig.inputs, strict=True):
        if spec.dtype.is_float:
            array_of(next(reductions))[...] += grad
    # this device's partial weight gradients: read after the statistics, written as outputs
    for grad, current, target in zip(grad_weights, stats[2:], context.outputs, strict=True):
        array_of(target)[...] = current + grad
