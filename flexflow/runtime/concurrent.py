"""Fused groups whose tasks exchange batch statistics in memory, run as concurrent launches.

Under data parallelism a batch norm's tiles each hold part of the batch, and each must
normalize with the whole batch's statistics. Run alone (flexflow.runtime.batch_statistics),
every batch norm costs a statistics task per device, a running-statistics task and its own
forward and backward tasks: ResNet-101's 104 of them made 1,490 Legate tasks per iteration on
2 CPUs, twice the kernels' time in runtime work. Where a group splits every op by sample over
consecutive CPUs of this process (`flexflow.launches.run_groups`), each of its passes is one
launch with a point per device instead, concurrent (every point runs at once), and the points
add their per-channel partial sums in memory (`StatisticsExchange`), in point order, so each
normalizes with the same statistics. Under data parallelism the whole step is one launch.

Each store argument of a launch is the same tile for every point (a weight) or a tiling whose
i-th tile is point i's; the task body finds its task by its point and reads the arguments as a
one-task-per-device launch would pass them. Every launch also reads and writes its processors'
elements of a token store, so Legion orders concurrent launches that share processors: two
launches whose points each held a processor while waiting for the other's would never finish.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from legate.core import Scope, TaskTarget, constant, dimension, get_machine
from legate.core import types as ty

from flexflow.fusion import SlotKind
from flexflow.ops.base import Region, region_shape
from flexflow.runtime.native_step import evaluated_outputs
from flexflow.runtime.passes import Pass

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


Argument = tuple[Any, Region]
"""A point's store argument: the store and the point's region of it."""


class ConcurrentLaunch:
    """The arguments of one concurrent launch over `devices` (consecutive CPUs), collected point
    by point in the order the task body reads them, then issued as one manual task."""

    def __init__(self, executor: Executor, devices: Sequence[int]) -> None:
        self.executor, self.devices = executor, tuple(devices)
        self.inputs: list[list[Argument]] = [[] for _ in devices]
        self.outputs: list[list[Argument]] = [[] for _ in devices]
        self.reductions: list[list[Argument]] = [[] for _ in devices]
        self.transient: set[int] = set()
        """ids of stores made for this launch alone (a batch's loss sums and targets): their
        views are not kept in the executor's cache, which would hold every batch's store."""

    def issue(self, pass_id: int, group: int, scalars: Sequence[int]) -> None:
        executor = self.executor
        first = executor.arguments.cpu_range(self.devices).start
        machine = get_machine().only(TaskTarget.CPU)[first : first + len(self.devices)]
        token = executor.arguments.launch_token()
        with Scope(machine=machine):
            task = executor.runtime.create_manual_task(
                executor.library, executor.task_id, (len(self.devices),)
            )
            for value in (executor.id, pass_id, group, -1, *scalars):  # task index: the point
                task.add_scalar_arg(value, ty.int64)
            for column in zip(*self.inputs, strict=True):
                task.add_input(*self._argument(column, aliased=True))
            # each processor's element of a token every concurrent launch reads and writes
            # last: Legion orders the launches that share processors, so no two of them wait
            # for each other's points (each point holds its processor while it waits)
            rows = (executor.arguments.tiling(token, (1,)), (dimension(0) + first,))
            task.add_input(*rows)
            for column in zip(*self.outputs, strict=True):
                task.add_output(*self._argument(column, aliased=False))
            task.add_output(*rows)
            for column in zip(*self.reductions, strict=True):
                partition, projection = self._argument(column, aliased=True)
                task.add_reduction(partition, ty.ReductionOpKind.ADD, projection)
            task.set_concurrent(True)
            task.execute()
        executor.tasks_issued += len(self.devices)  # a task per point, as flexflow.launches

    def _argument(self, column: Sequence[Argument], aliased: bool) -> tuple:
        """(store or partition, projection) naming each point's region of one store;
        `aliased`: every point may name the same tile (read, or added into by reduction)."""
        stores = {id(store) for store, _ in column}
        store, first = column[0]
        if len(stores) != 1:
            raise AssertionError("a concurrent launch argument names several stores")
        if all(region == first for _, region in column):
            if not aliased:
                raise AssertionError("every point of a concurrent launch would write one tile")
            keep = id(store) not in self.transient
            return (self.executor.arguments.tile(store, first, keep), None)
        shape = region_shape(first)
        for point, (_, region) in enumerate(column):  # point i's tile: the i-th along dim 0
            size = shape[0]
            if region[0] != (point * size, (point + 1) * size) or region[1:] != first[1:]:
                raise AssertionError(f"tiles {[r for _, r in column]} do not stack by point")
        if any(lo != 0 for lo, _ in first[1:]):
            raise AssertionError(f"tile {first} is not at the origin past the first dimension")
        partition = self.executor.arguments.tiling(store, shape, id(store) not in self.transient)
        projection = (dimension(0),) + tuple(constant(0) for _ in shape[1:])
        return (partition, projection)


def _forward_inputs(launch: ConcurrentLaunch, point: int, layout, device: int) -> None:
    """A fused forward's input slots, less the model inputs read from the staged batch; with
    flat parameters, the device's copy of every weight first instead of its weight slots
    (`TaskArguments.add_forward_inputs`)."""
    executor, params = launch.executor, launch.executor.params
    flat = params.flat is not None
    if flat:
        launch.inputs[point].append(params.flat_argument(params.flat_weights, device))
    for slot in layout.inputs:
        if flat and slot.kind is SlotKind.WEIGHT:
            continue
        if slot.kind is not SlotKind.TENSOR or executor.feeds.key(slot.id) < 0:
            launch.inputs[point].append(executor.arguments.slot_argument(slot, device))


def issue_forward(executor: Executor, group: int, training: bool, keys: Sequence[int]) -> None:
    """The group's forward pass (no loss) as one concurrent launch."""
    devices = executor.strategy[executor.groups[group].ops[0]].devices
    launch = ConcurrentLaunch(executor, devices)
    for point, (info, device) in enumerate(zip(executor.fused_tasks[group], devices, strict=True)):
        _forward_inputs(launch, point, info.forward, device)
        launch.outputs[point] += [
            executor.arguments.slot_argument(s, device) for s in info.forward.outputs
        ]
    launch.issue(Pass.FUSED_FORWARD, group, (int(training), executor.steps_trained, *keys))


def issue_with_loss(
    executor: Executor,
    group: int,
    training: bool,
    step: bool,
    loss_args: tuple[int, float, int, int],
    target: tuple[Any, int] | None,
    sums: Any,
) -> None:
    """The group's forward pass and loss, and with `step` its backward, as one concurrent
    launch (the arguments `flexflow.runtime.step_tasks.issue_loss` gives each task). The loss's
    valid count is the batch's: each point takes its tile's share
    (flexflow.runtime.fused_body.run_point). `target`: its store and rank, unless staged."""
    output = executor.graph.ops[-1].outputs[0]
    devices = executor.strategy[executor.groups[group].ops[0]].devices
    launch = ConcurrentLaunch(executor, devices)
    launch.transient = {id(sums)} | ({id(target[0])} if target is not None else set())
    regions = executor.regions(len(executor.graph.ops) - 1)
    params = executor.params
    pending = step and executor.pending_update and params.flat is not None
    for point, (info, device) in enumerate(zip(executor.fused_tasks[group], devices, strict=True)):
        region = regions[point]
        inputs, outputs = launch.inputs[point], launch.outputs[point]
        _forward_inputs(launch, point, info.forward, device)
        if target is not None:
            inputs.append((target[0], region[: target[1]]))
        if not step:  # the activations (`evaluated_outputs`) and the loss gradient go to
            # their stores
            written = evaluated_outputs(executor, group, info.index, loss_args[0], training)
            outputs += [executor.arguments.slot_argument(s, device) for s in written]
            outputs.append((executor.grads[output], region))
        outputs.append((sums, ((point, point + 1), (0, 2))))
        if step:  # the running statistics, then this device's partial weight gradients
            outputs += [executor.arguments.slot_argument(s, device) for s in info.forward.states]
            layout = info.backward
            if params.flat is not None:  # every partial gradient in the device's flat row
                outputs.append(params.flat_argument(params.flat_partials, device))
            else:
                read = [
                    executor.arguments.partial_grad_argument(s.id, s.region, device)
                    for s in layout.accumulators
                ]
                written = [
                    executor.arguments.partial_grad_argument(s.id, s.region, device)
                    for s in layout.overwrites
                ]
                inputs += read
                outputs += read + written
            launch.reductions[point] += [
                executor.gradients.reduction_argument(s, (group, info.index))
                for s in layout.reductions
            ]
            if pending:  # last: the arguments of the update it applies first
                read, written = params.pending_update_arguments(device, params.flat_argument)
                inputs += read
                outputs += written
    which = Pass.FUSED_STEP if step else Pass.FUSED_FORWARD_LOSS
    # a step's last own scalar: the number of the update it applies first (0: none)
    update = (executor.iteration if pending else 0,) if step else ()
    scalars = (int(training), executor.steps_trained, *loss_args, *update)
    launch.issue(which, group, (*scalars, *executor.feeds.staged_keys()))


def issue_backward(executor: Executor, group: int, training: bool) -> None:
    """The group's backward pass as one concurrent launch (the arguments
    `flexflow.runtime.pass_tasks.issue_group` gives each task; a model with batch norms has no
    flat parameters)."""
    devices = executor.strategy[executor.groups[group].ops[0]].devices
    launch = ConcurrentLaunch(executor, devices)
    for point, (info, device) in enumerate(zip(executor.fused_tasks[group], devices, strict=True)):
        layout = info.backward
        read = [
            executor.arguments.partial_grad_argument(s.id, s.region, device)
            for s in layout.accumulators
        ]
        written = [
            executor.arguments.partial_grad_argument(s.id, s.region, device)
            for s in layout.overwrites
        ]
        launch.inputs[point] += executor.arguments.backward_inputs(group, info.index, device)
        launch.inputs[point] += read
        launch.outputs[point] += [
            executor.arguments.slot_argument(s, device) for s in layout.outputs
        ]
        launch.outputs[point] += read + written
        key = (group, info.index)
        launch.reductions[point] += [
            executor.gradients.reduction_argument(s, key) for s in layout.reductions
        ]
    launch.issue(Pass.FUSED_BACKWARD, group, (int(training), executor.steps_trained))
