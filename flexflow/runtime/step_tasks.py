"""The loss of an iteration as Legate tasks (paper §7's runtime): on each tile of the model's
output, in its own task, after the last fused group's forward pass in that group's task, or,
in training, with that group's backward pass too (a step task), in a C++ body where it can
(`flexflow.runtime.native_tasks`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from legate.core import Scope
from legate.core import types as ty

from flexflow.errors import ShapeError
from flexflow.graph import OperatorGraph
from flexflow.runtime.batches import BatchStats
from flexflow.runtime.concurrent import issue_with_loss
from flexflow.runtime.loss import (
    LOSS_IDS,
    LOSS_KINDS,
    TARGET_RANK,
    check_legate_target,
    check_target,
    loss_name,
    predictions_per_sample,
)
from flexflow.runtime.native_step import SPARSE_CROSSENTROPY, NativeStep, evaluated_outputs
from flexflow.runtime.native_tasks import StepScalars, address
from flexflow.runtime.passes import Pass
from flexflow.runtime.stores import slice_store

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor

Checked = tuple[str, int, int]
"""A loss's name, the batch's valid samples and the target's rank (`checked_target`)."""


def checked_target(graph: OperatorGraph, name: str, target, valid: int | None) -> Checked:
    """The loss's name, valid samples and target rank, once `target` is known to fit the
    model's output."""
    name = loss_name(name)
    shape = graph.ops[-1].sig.outputs[0].shape
    valid = shape[0] if valid is None else valid
    if not 0 < valid <= shape[0]:
        raise ShapeError(f"valid samples must be in 1..{shape[0]}, got {valid}.")
    target_rank = TARGET_RANK[name](len(shape))
    if not hasattr(target, "__legate_data_interface__"):
        check_target(name, shape, np.asarray(target))
    else:
        check_legate_target(name, shape, target)
    return name, valid, target_rank


def issue_loss(
    executor: Executor,
    checked: Checked,
    target,
    fused: int | None,
    training: bool,
    step: bool = False,
) -> BatchStats:
    """Loss tasks on the output's tiles, each writing the loss and the correct predictions
    of its share of the first `valid` samples into its row of one store; with `fused`, the
    tasks of that (last) group's forward pass compute the loss after it, and with `step`
    its backward pass too (and first the pending update, if any: the caller clears it)."""
    name, valid, target_rank = checked
    graph, feeds = executor.graph, executor.feeds
    output_op = len(graph.ops) - 1
    config = executor.strategy[output_op]
    shape = graph.ops[output_op].sig.outputs[0].shape
    predictions = predictions_per_sample(shape)
    # what the loss divides by: its own divisor per sample, for the valid samples
    total = valid * LOSS_KINDS[name].divisor_per_sample(shape)
    tiles = executor.regions(output_op)
    on_host = not hasattr(target, "__legate_data_interface__")
    if on_host:
        target = np.asarray(target)
    staged = feeds.staging and on_host
    if staged:
        key = feeds.stage(np.ascontiguousarray(target), len(tiles))
    else:
        target_store, key = executor.store_of(target), -1
    # (loss, correct) per task, summed when read: a reduction from tasks on several
    # processors into one store serialized them (each device's whole forward pass here)
    sums = executor.runtime.create_store(ty.float64, (len(tiles), 2))
    loss_id = LOSS_IDS.index(name)
    pending = executor.pending_update
    output, output_grad = executor.tensors[executor.output], executor.grads[executor.output]
    held: list[np.ndarray] = []
    if fused is not None and executor.groups[fused].exchanges:  # one concurrent launch
        loss_args = (loss_id, total, valid, key)
        stored = None if staged else (target_store, target_rank)
        issue_with_loss(executor, fused, training, step, loss_args, stored, sums)
        return BatchStats(sums, valid, valid * predictions, held=held)
    for index, region in enumerate(tiles):
        device = config.devices[index]
        rows = max(0, valid - region[0][0])
        loss_args = (loss_id, total, rows, key)
        native = executor.native_steps.get((fused, index)) if step else None
        with Scope(machine=executor.processors[device]):
            labels = None if staged else target_store
            if native is not None and runs_in_cpp(executor, native, loss_id, labels):
                task = _native_step_task(executor, device, native, key, region, rows, total, held)
                info = executor.fused_tasks[fused][index]
                executor.arguments.add_forward_inputs(task, info.forward, device)
            elif fused is None:
                task = executor.new_task(device, Pass.LOSS, output_op, index, *loss_args)
                task.add_input(slice_store(output, region))
            else:
                mode = (int(training), executor.steps_trained)  # dropout's masks
                which = Pass.FUSED_STEP if step else Pass.FUSED_FORWARD_LOSS
                # a step's last own scalar: the number of the update it applies first
                update = (executor.iteration if pending else 0,) if step else ()
                keys = feeds.staged_keys()
                task = executor.new_task(
                    device, which, fused, index, *mode, *loss_args, *update, *keys
                )
                info = executor.fused_tasks[fused][index]
                executor.arguments.add_forward_inputs(task, info.forward, device)
                if not step:  # a step keeps its activations in memory, an evaluation in C all
                    # but the output (`evaluated_outputs`)
                    for slot in evaluated_outputs(executor, fused, index, loss_id, training):
                        task.add_output(executor.arguments.slot_store(slot, device))
            if not staged:
                task.add_input(slice_store(target_store, region[:target_rank]))
            if not step:  # ... and its loss gradient
                task.add_output(slice_store(output_grad, region))
            task.add_output(slice_store(sums, ((index, index + 1), (0, 2))))
            if step:  # its batch norms' running statistics (TaskLayout.states), then the
                # backward's: partial weight gradients, input gradients
                for slot in info.forward.states:
                    task.add_output(executor.arguments.slot_store(slot, device))
                executor.arguments.add_partial_grads(task, info.backward, device)
                executor.arguments.add_reductions(task, info.backward, (fused, index))
                if pending:
                    executor.arguments.add_pending_update(task, device)
            task.execute()
    return BatchStats(sums, valid, valid * predictions, held=held)


def runs_in_cpp(executor: Executor, native: NativeStep, loss_id: int, labels_store) -> bool:
    """Whether a step task with C program `native` runs with a C++ body
    (flexflow.runtime.native_tasks): one its body can run (`NativeStep.in_cpp_body`), sparse
    cross-entropy on labels staged in this process (`labels_store` None) or in an int64 store."""
    return (
        executor.cpp_steps
        and native.in_cpp_body
        and loss_id == SPARSE_CROSSENTROPY
        and (labels_store is None or labels_store.type == ty.int64)
    )


def _native_step_task(
    executor: Executor,
    device: int,
    native: NativeStep,
    key: int,
    region,
    rows: int,
    total: int,
    held: list,
):
    """A step task with a C++ body, its scalars added (its stores are a Python step's):
    the input tile and the labels taken from the staged batch here (if staged), into
    `held`."""
    feeds = executor.feeds
    xs = []  # each model input's tile, in the program's order
    for which, (slot, _) in enumerate(native.program.inputs):
        x_key = feeds.key(slot.id)
        if x_key < 0:  # the task reads it from its store
            xs.append(0)
            continue
        held.append(native.input_array(feeds.staged_tile(x_key, slot.region), which))
        xs.append(address(held[-1]))
    labels = 0
    if key >= 0:  # else the task reads them from their store
        held.append(native.flat_labels(feeds.staged_tile(key, region)))
        labels = address(held[-1])
    update, hyper, copies = 0, (0.0,) * 7, 0
    if executor.pending_update:  # the update it applies first, as the Python body's
        update, hyper = executor.optimizer.native_update(executor.iteration)
        copies = len(executor.params.devices)
    scalars = StepScalars(
        native.plan_address, tuple(xs), labels, native.valid_predictions(rows),
        float(total), update, copies, tuple(map(float, hyper)), executor.steps_trained,
    )  # fmt: skip
    task = executor.created_task(device, executor.native_task_id)
    scalars.add_to(task)
    executor.cpp_steps_issued += 1
    return task
