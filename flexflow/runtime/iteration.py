"""One iteration of an executor as Legate tasks (paper §7): the model inputs fed, each fused
group's forward pass, the loss, and in training the backward passes in reverse and the
optimizer's update (a pass's tasks: `flexflow.runtime.pass_tasks`); a list of batches issued
at once, several steps to a Legate launch where they can (`flexflow.runtime.step_launches`).
`Executor`'s `forward`, `train_batch`, `eval_batch`, `train_batches` and `eval_batches` are
these functions.

The loss (`flexflow.runtime.loss`) runs on each tile of the model's output, on that tile's
device, inside the last fused group's forward tasks (or as its own tasks after a batch norm):
each writes its share of the loss and correct predictions into its row of a small store, and
its tile of the loss gradient, which seeds the backward pass (in memory when the backward runs
in the same task). The model's output is the first output of the last op; other outputs
nothing reads (an LSTM's last cell state) get zero gradients. Model inputs are fed by copy
tasks into double-buffered stores, so the next batch's feed overlaps this iteration, or, in a
one-rank run whose step tasks read them, straight from the batch held in this process
(`flexflow.runtime.feeding`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexflow.runtime.batches import BatchStats
from flexflow.runtime.loss import loss_name
from flexflow.runtime.pass_tasks import issue_group, issue_update
from flexflow.runtime.passes import Pass
from flexflow.runtime.step_launches import issue_evaluations, issue_steps
from flexflow.runtime.step_tasks import checked_target, issue_loss
from flexflow.runtime.stores import read_store

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor

Batches = Sequence[tuple[Mapping[str, np.ndarray], Any, int | None]]
"""Batches as (inputs by input tensor name, target, valid samples or None for all)."""


def forward(
    executor: Executor, inputs: Mapping[str, np.ndarray], read: bool, training: bool
) -> np.ndarray | None:
    """Every group's forward pass after the pending update; the output read back if `read`."""
    executor.check_open()
    executor.apply_pending()
    executor.feed_inputs(inputs)
    for group_id in range(len(executor.groups)):
        issue_group(executor, group_id, Pass.FORWARD, training)
    return read_store(executor.store_of(executor.tensors[executor.output])) if read else None


def train_batch(
    executor: Executor, inputs: Mapping[str, np.ndarray], target, loss: str, valid: int | None
) -> BatchStats:
    """The gradients zeroed, the forward pass and the loss (with the last group's backward
    where it is a step task), the other backward passes in reverse, then the update, or its
    deferral to the next step (`updates_in_step`)."""
    executor.gradients.fill_zeros(executor.plan.reduced_grads)
    for pid, store in executor.params.partials.items():
        if pid not in executor.plan.sole:
            executor.runtime.issue_fill(store, 0.0)
    stats, stepped = _forward_and_loss(executor, inputs, target, loss, valid, training=True)
    for group_id in reversed(range(len(executor.groups) - int(stepped))):
        issue_group(executor, group_id, Pass.BACKWARD, training=True)
    executor.iteration += 1
    if executor.updates_in_step:  # the next step applies it (or `apply_pending`)
        executor.params.swap()
        executor.pending_update = True
    else:
        issue_update(executor, executor.params.partials)
    return stats


def eval_batch(
    executor: Executor, inputs: Mapping[str, np.ndarray], target, loss: str, valid: int | None
) -> BatchStats:
    """The forward pass and the loss, after the pending update."""
    executor.apply_pending()
    return _forward_and_loss(executor, inputs, target, loss, valid, training=False)[0]


def _forward_and_loss(
    executor: Executor,
    inputs: Mapping[str, np.ndarray],
    target,
    loss: str,
    valid: int | None,
    training: bool,
) -> tuple[BatchStats, bool]:
    """The forward pass and the loss; the last fused group computes the loss in its own
    tasks (one task and one dependence less per device and iteration), and in training
    its backward pass too where it can (`FusedTask.step_ready`). Whether it did."""
    checked = checked_target(executor.graph, loss, target, valid)
    began = executor.tasks_issued
    executor.feed_inputs(inputs)
    last = len(executor.groups) - 1
    fused = None if executor.has_statistics(last) else last
    for group_id in range(last if fused is not None else last + 1):
        issue_group(executor, group_id, Pass.FORWARD, training)
    step = training and fused is not None and executor.step_ready[fused]
    stats = issue_loss(executor, checked, target, fused, training, step)
    if step:  # it applied the pending update first
        executor.pending_update = False
    executor.unread.add(stats, began, executor.tasks_issued)
    return stats, step


def train_batches(executor: Executor, batches: Batches, loss: str) -> list[BatchStats]:
    """`steps_per_launch` to a launch (`issue_steps`) where they can, else `train_batch` each."""
    executor.check_open()
    if not _launches(executor, batches, loss):
        return [
            executor.train_batch(inputs, target, loss, valid) for inputs, target, valid in batches
        ]
    return _in_launches(executor, batches, loss, issue_steps)


def eval_batches(executor: Executor, batches: Batches, loss: str) -> list[BatchStats]:
    """`steps_per_launch` to a launch (`issue_evaluations`) where they can, else `eval_batch`
    each."""
    executor.check_open()
    if not _launches(executor, batches, loss):
        return [
            executor.eval_batch(inputs, target, loss, valid) for inputs, target, valid in batches
        ]
    return _in_launches(executor, batches, loss, issue_evaluations)


def _launches(executor: Executor, batches: Sequence[tuple], loss: str) -> bool:
    """Whether `batches` go `steps_per_launch` to a Legate launch: where training steps
    launch so, under sparse categorical cross-entropy on inputs and labels in this
    process (a launch reads its inputs staged from the batch; cuPyNumeric inputs with
    numpy labels were looked up there and not found)."""

    def legate(value) -> bool:
        return hasattr(value, "__legate_data_interface__")

    return (
        executor.steps_per_launch > 1
        and loss_name(loss) == "sparse_categorical_crossentropy"
        and not any(
            legate(target) or any(legate(v) for v in inputs.values())
            for inputs, target, _ in batches
        )
    )


def _in_launches(
    executor: Executor, batches: Sequence[tuple], loss: str, issue
) -> list[BatchStats]:
    """`issue(executor, launch, chunk, loss)` for each chunk of `steps_per_launch` batches,
    after the pending update; their results, in order."""
    executor.apply_pending()
    results: list[BatchStats] = []
    for start in range(0, len(batches), executor.steps_per_launch):
        chunk = batches[start : start + executor.steps_per_launch]
        results.extend(issue(executor, executor.step_launch, chunk, loss))
    return results
