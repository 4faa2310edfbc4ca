"""A fused group's forward or backward pass and the optimizer's updates as Legate tasks, one per
device (paper §7).

Gradients of tensors read across fused groups are added into their stores with ADD reductions
(which also sum halos); where tasks on different devices would add into overlapping regions
(which Legate runs one after the other), into several parts that the reading tasks sum
(`flexflow.runtime.gradients`). Weight gradients are not: each device writes its own partial gradient
(`flexflow.runtime.weights`), and the update sums them: one task per device over the weight
rows it owns (`flexflow.tiling`), or, where the whole model is one training-step task per
device reading its weights whole (data parallelism), inside each device's next step, on that
device's own copy of the weights (`updates_in_step`). Batch norm's tiles normalize with the
whole batch's statistics under any sample split (`flexflow.runtime.batch_statistics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from legate.core import Scope

from flexflow.runtime.concurrent import issue_backward, issue_forward
from flexflow.runtime.passes import Pass

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def issue_group(executor: Executor, group_id: int, which: Pass, training: bool) -> None:
    """Every task of a fused group for one pass; an op with batch statistics alone."""
    group = executor.groups[group_id]
    if executor.has_statistics(group_id):
        executor.batch_statistics.run(executor, group.ops[0], which, training)
        return
    fused = Pass.FUSED_FORWARD if which is Pass.FORWARD else Pass.FUSED_BACKWARD
    devices = executor.strategy[group.ops[0]].devices
    keys = ()
    if which is Pass.FORWARD and group_id == len(executor.groups) - 1:
        keys = executor.feeds.staged_keys()
    if group.exchanges:  # one concurrent launch (flexflow.runtime.concurrent)
        if which is Pass.FORWARD:
            issue_forward(executor, group_id, training, keys)
        else:
            issue_backward(executor, group_id, training)
        return
    for task_info, device in zip(executor.fused_tasks[group_id], devices, strict=True):
        layout = task_info.forward if which is Pass.FORWARD else task_info.backward
        with Scope(machine=executor.processors[device]):
            task = executor.new_task(
                device,
                fused,
                group_id,
                task_info.index,
                int(training),
                executor.steps_trained,
                *keys,
            )
            if which is Pass.FORWARD:
                executor.arguments.add_forward_inputs(task, layout, device)
            else:
                for argument in executor.arguments.backward_inputs(
                    group_id, task_info.index, device
                ):
                    task.add_input(executor.arguments.tile(*argument))
            for slot in layout.outputs:
                task.add_output(executor.arguments.slot_store(slot, device))
            executor.arguments.add_reductions(task, layout, (group_id, task_info.index))
            executor.arguments.add_partial_grads(task, layout, device)
            task.execute()


def issue_update(executor: Executor, partial_grads: Mapping[int, Any]) -> None:
    """The optimizer's update, in place: one task per device over every weight tile it
    owns (`flexflow.tiling`; under `updates_in_step`, every weight's replica there),
    reading the tiles of the weights, gradients and states."""
    for device, items in executor.update_groups.items():
        with Scope(machine=executor.processors[device]):
            task = executor.new_task(device, Pass.UPDATE, device, -1, executor.iteration)
            for pid, region in items:
                stores = (executor.params.weights[pid], *executor.params.states[pid])
                views = [executor.params.view(store, pid, device) for store in stores]
                tiles = [executor.arguments.tile(view, region) for view in views]
                task.add_input(tiles[0])
                grads = partial_grads[pid]  # every device's partial gradient, row by row
                for k in range(grads.shape[0]):  # (see add_pending_update)
                    task.add_input(executor.arguments.tile(grads, ((k, k + 1), *region)))
                for tile in tiles[1:]:
                    task.add_input(tile)
                for tile in tiles:
                    task.add_output(tile)
            task.execute()


def issue_pending_update(executor: Executor) -> None:
    """The pending update's tasks (`Executor.apply_pending`) on the flat buffers."""
    # as a step applies it first: one task per device naming each flat row once, not every
    # weight's views of them (a small transformer's 200 weights' views cost Legion 240-310
    # ms of analysis, one task per device 5 ms)
    for device in executor.params.devices:
        with Scope(machine=executor.processors[device]):
            task = executor.new_task(device, Pass.FLAT_UPDATE, device, -1, executor.iteration)
            executor.arguments.add_pending_update(task, device)
            task.execute()
