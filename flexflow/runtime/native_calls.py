"""Fused step and evaluation tasks whose Python body runs the whole task as one C call
(`flexflow.runtime.native_step`): a training step's forward, loss and backward (after
`fused_body.run_fused` has applied its pending update), or an evaluation batch's forward and
loss. (Step tasks with C++ bodies, no Python at all: `native_tasks`.)"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from flexflow.runtime.native_step import NativeStep
from flexflow.runtime.passes import Pass
from flexflow.runtime.task_context import forward_inputs

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def run_native_step(
    executor: Executor, native: NativeStep, inputs, outputs, loss_args, keys, iteration: int
) -> None:
    """A step task as one C call (flexflow.runtime.native_step), from its arguments as
    `forward_inputs` receives them: with flat parameters (`NativeStep.flat`), this device's
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
        inputs = forward_inputs(executor, task.forward, inputs, keys, None) if keys else inputs
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


def run_native_eval(
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
    arrays = forward_inputs(executor, task.forward, inputs, keys, flat)
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
