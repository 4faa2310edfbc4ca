"""Several training steps in one Legate launch (Keras' steps_per_execution), for data
parallelism whose step tasks run in C++ (`flexflow.runtime.native_tasks`).

Why: each launch of a step task costs Legate and Legion work on the runtime's threads and an
idle gap on the processors between one step and the next (on the runtime benchmark's MLP,
about 0.3-1 ms of a 2.8 ms iteration on this repository's 2-core host), whatever the step
computes. One launch of K steps pays it once: a concurrent launch with a point per device,
whose C++ body (native/legate_tasks.cc, NativeStepsTask) runs the K steps and applies each
step's update in place, the devices telling each other where their partial gradients are
through the launch's CPU communicator. Each device sums the partial gradients in device order
with the same C update the one-step tasks run, so the weights get the same bits whatever K
is, and the same as on one device.

A launch of several steps applies its last update itself, so it leaves no update pending; the
executor applies a pending one (from a one-step iteration before it) first. It runs where a
one-step iteration would be one C++ step task per device reading its batch from this process:
the whole model one fused group on CPUs, each device a copy of the weights in one flat buffer
(`Executor.updates_in_step`), sparse categorical cross-entropy on labels in this process, and
one process (`Feeds.staging`). `plan_step_launch` says why not otherwise; the executor then
issues the iterations one launch each, with the same numbers.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from legate.core import Scope, TaskTarget, get_machine
from legate.core import types as ty

from flexflow.launches import consecutive_cpus
from flexflow.ops.base import Region
from flexflow.runtime.batches import BatchStats, LaunchRows
from flexflow.runtime.loss import predictions_per_sample
from flexflow.runtime.native_step import NativeStep
from flexflow.runtime.native_tasks import address
from flexflow.runtime.step_tasks import checked_target

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor

HYPERPARAMETERS = 7
"""Floats per update in the task's scalars (ff_update.h)."""

Batch = tuple[Mapping[str, np.ndarray], Any, int | None]
"""One iteration's model inputs by name, target, and valid samples (None: all)."""


@dataclass(frozen=True, eq=False)
class StepLaunch:
    """What stays the same between an executor's launches of several steps: its devices'
    processors, their C step programs, tiles and scratch (two buffers of partial gradients
    per device, which the launch's points read from each other)."""

    machine: Any
    """The Legate machine of the devices' processors, in device order (point d on device d)."""
    programs: tuple[NativeStep, ...]
    tiles: tuple[Region, ...]
    """Each device's tile of the model's output (its rows of the batch)."""
    input_ids: tuple[int, ...]
    """The model inputs the step tasks read from this process, in the programs' order."""
    input_tiles: tuple[tuple[Region, ...], ...]
    """Per device, its tile of each of them."""
    scratch: tuple[np.ndarray, ...]

    @property
    def devices(self) -> int:
        return len(self.programs)


def plan_step_launch(executor: Executor) -> StepLaunch | str:
    """The executor's launches of several steps, or why its iterations cannot run that way."""
    if not executor.cpp_steps:
        return "the step tasks run Python bodies (cpp_steps=False)"
    if len(executor.groups) != 1 or not executor.updates_in_step:
        return "the model is not one step task per device with a copy of the weights on each"
    if executor.params.flat is None:
        return "the model has no weights"
    programs = [executor.native_steps.get((0, i)) for i in range(len(executor.fused_tasks[0]))]
    if any(p is None or p.flat is None for p in programs):
        return "not every step task runs as one C call (flexflow.runtime.native_step)"
    if any(p.program.reads_running for p in programs):
        return "its batch norms' running statistics are stores the C++ task bodies do not take"
    if not executor.feeds.staging:
        return "the batches travel as stores (several processes)"
    slots = [slot for slot, _ in programs[0].program.inputs]
    if any(slot.id not in executor.feeds.staged_inputs for slot in slots):
        return "the step tasks read a model input from a store"
    output_op = len(executor.graph.ops) - 1
    devices = tuple(executor.strategy[output_op].devices)
    cpus = consecutive_cpus(devices, executor.device_kinds)
    if isinstance(cpus, str):
        return cpus
    if devices != tuple(executor.params.devices):
        return "the devices are not distinct CPUs in the order of the weights' copies"
    machine = get_machine().only(TaskTarget.CPU)[cpus.start : cpus.stop]
    size = executor.params.flat.size
    return StepLaunch(
        machine=machine,
        programs=tuple(programs),
        tiles=tuple(executor.regions(output_op)),
        input_ids=tuple(slot.id for slot in slots),
        input_tiles=tuple(tuple(slot.region for slot, _ in p.program.inputs) for p in programs),
        scratch=tuple(np.zeros(2 * size, dtype=np.float32) for _ in programs),
    )


@functools.cache
def _array_type(element: str, count: int):
    return ty.array_type(getattr(ty, element), count)


def _add_array(task, values: Sequence, element: str) -> None:
    task.add_scalar_arg(tuple(values), _array_type(element, len(values)))


@dataclass(frozen=True, slots=True)
class _Staged:
    """A launch's batches staged in this process: per batch and device (k * D + d) the
    addresses of its model input tiles (the programs' order) and of its labels and its valid
    predictions; per batch the loss's total and its results (holding the arrays addressed)."""

    xs: list[int]
    labels: list[int]
    valid_rows: list[int]
    totals: list[float]
    results: list[BatchStats]


def _staged_batches(
    executor: Executor, launch: StepLaunch, batches: Sequence[Batch], loss: str, sums: LaunchRows
) -> _Staged:
    """Stage `batches` for one launch whose loss rows are `sums`."""
    graph, feeds = executor.graph, executor.feeds
    predictions = predictions_per_sample(graph.ops[-1].sig.outputs[0].shape)
    staged = _Staged([], [], [], [], [])
    for k, (inputs, target, valid) in enumerate(batches):
        _, valid, _ = checked_target(graph, loss, target, valid)
        executor.feed_inputs(inputs)
        x_keys = [feeds.key(tensor) for tensor in launch.input_ids]
        labels_key = feeds.stage(np.ascontiguousarray(np.asarray(target)), launch.devices)
        held: list[np.ndarray] = []
        for program, tile, input_tiles in zip(
            launch.programs, launch.tiles, launch.input_tiles, strict=True
        ):
            for which, (x_key, input_tile) in enumerate(zip(x_keys, input_tiles, strict=True)):
                held.append(program.input_array(feeds.staged_tile(x_key, input_tile), which))
                staged.xs.append(address(held[-1]))
            held.append(program.flat_labels(feeds.staged_tile(labels_key, tile)))
            staged.labels.append(address(held[-1]))
            staged.valid_rows.append(program.valid_predictions(max(0, valid - tile[0][0])))
        staged.totals.append(float(valid * predictions))
        staged.results.append(BatchStats(sums, valid, valid * predictions, step=k, held=held))
    return staged


def _add_batches(task, launch: StepLaunch, staged: _Staged) -> None:
    """The scalars both C++ tasks of several batches begin with (native/legate_tasks.cc)."""
    _add_array(task, [p.plan_address for p in launch.programs], "int64")
    for values in (staged.xs, staged.labels, staged.valid_rows):
        _add_array(task, values, "int64")
    _add_array(task, staged.totals, "float64")


def issue_evaluations(
    executor: Executor, launch: StepLaunch, batches: Sequence[Batch], loss: str
) -> list[BatchStats]:
    """Issue `batches` as one launch of len(batches) evaluation batches (sparse categorical
    cross-entropy; no update may be pending): on each device its program's forward pass and
    loss (`NativeStep.evaluate`'s C call) per batch, in a C++ body (native/legate_tasks.cc,
    NativeEvalsTask). Their results, each holding the arrays its batch's tasks read."""
    sums = LaunchRows(executor.runtime.create_store(ty.float64, (launch.devices, len(batches), 2)))
    began = executor.tasks_issued
    staged = _staged_batches(executor, launch, batches, loss, sums)
    with Scope(machine=launch.machine):
        task = executor.runtime.create_manual_task(
            executor.library, executor.evals_task_id, (launch.devices,)
        )
        _add_batches(task, launch, staged)
        task.add_input(executor.params.device_rows(executor.params.flat_weights))
        task.add_output(sums.store.partition_by_tiling((1, len(batches), 2)))
        task.execute()
    executor.tasks_issued += 1
    executor.unread.add(staged.results[-1], began, executor.tasks_issued)
    return staged.results


def issue_steps(
    executor: Executor, launch: StepLaunch, batches: Sequence[Batch], loss: str
) -> list[BatchStats]:
    """Issue `batches` as one launch of len(batches) steps (no update may be pending); their
    results, each holding the arrays its steps read from this process."""
    sums = LaunchRows(executor.runtime.create_store(ty.float64, (launch.devices, len(batches), 2)))
    began = executor.tasks_issued
    staged = _staged_batches(executor, launch, batches, loss, sums)
    kind, hyper = 0, []
    for k in range(len(batches)):
        kind, values = executor.optimizer.native_update(executor.iteration + k + 1)
        hyper.extend(values + (0.0,) * (HYPERPARAMETERS - len(values)))
    params = executor.params
    rows = [params.device_rows(store) for store in (params.flat_weights, *params.flat_states)]
    with Scope(machine=launch.machine):
        task = executor.runtime.create_manual_task(
            executor.library, executor.steps_task_id, (launch.devices,)
        )
        _add_batches(task, launch, staged)
        task.add_scalar_arg(int(kind), ty.int64)
        _add_array(task, [float(h) for h in hyper], "float32")
        _add_array(task, [address(s) for s in launch.scratch], "int64")
        task.add_scalar_arg(executor.steps_trained, ty.int64)  # the first step's (dropout's)
        for row in rows:  # read and written: updated in place
            task.add_input(row)
        for row in rows:
            task.add_output(row)
        task.add_output(sums.store.partition_by_tiling((1, len(batches), 2)))
        if launch.devices > 1:
            task.add_communicator("cpu")
            task.set_concurrent(True)
        task.execute()
    executor.tasks_issued += 1
    executor.cpp_steps_issued += launch.devices
    executor.iteration += len(batches)
    executor.unread.add(staged.results[-1], began, executor.tasks_issued)
    return staged.results
