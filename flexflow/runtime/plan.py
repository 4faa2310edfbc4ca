"""What runs where under one strategy (paper §7): the runtime's plan, decided before any store.

Pure and free of Legate: from the graph, the strategy, the kinds of this process's processors
and whether one process holds every rank's data, which ops run as one task per device, which
gradients tasks add into or write whole, which devices update which weight tiles, and which
model inputs a step task reads straight from the batch. The executor allocates stores and
issues tasks by it (`flexflow.runtime.executor`); tests can read it without starting Legate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flexflow.fusion import (
    FusedGroup,
    FusedTask,
    fused_task,
    inputs_read_in_step,
    sole_gradients,
    updates_in_step,
)
from flexflow.graph import OperatorGraph
from flexflow.launches import run_groups
from flexflow.ops.base import Region, full_region
from flexflow.strategy import Strategy
from flexflow.tiling import update_pieces


@dataclass(frozen=True, slots=True)
class ExecutionPlan:
    regions: tuple[tuple[Region, ...], ...]
    """Per op, the output tile of each of its tasks."""
    groups: tuple[FusedGroup, ...]
    """Consecutive ops run as one task per device (`flexflow.fusion`); ops whose tasks share
    batch statistics stay alone and run through `batch_statistics`, unless their group is
    launched concurrently and exchanges them (`flexflow.runtime.concurrent`)."""
    sole: frozenset[int]
    """Parameters whose partial gradients their backward tasks write whole: not zeroed."""
    fused_tasks: tuple[tuple[FusedTask, ...], ...]
    """Per group, its tasks (one per device)."""
    step_ready: tuple[bool, ...]
    """Per group, whether its tasks can run the whole step (`FusedTask.step_ready`)."""
    reduced_grads: tuple[int, ...]
    """Gradients that backward tasks add into, zeroed each iteration; internal ones stay in
    their fused task, the loss writes the output's, and model inputs get none."""
    contributors: dict[int, tuple[int, ...]]
    """Per parameter, the devices whose backward tasks compute parts of its gradient."""
    updates_in_step: bool
    """Whether each device keeps its own copy of every weight (and optimizer state) and
    applies the optimizer's update at the start of its next step task
    (`flexflow.fusion.updates_in_step`): no update tasks, one dependence less."""
    update_groups: dict[int, list[tuple[int, Region]]]
    """Per device, the (parameter, region) tiles its one update task updates in place: the
    pieces `flexflow.tiling` assigns it, or, under `updates_in_step` (where update tasks only
    apply a pending update), its whole copy of every weight."""
    inputs_read_in_step: dict[int, int]
    """Model inputs a step task reads from the batch held in this process, with how many
    task arguments read each (`flexflow.fusion.inputs_read_in_step`; none unless staging)."""


def execution_plan(
    graph: OperatorGraph, strategy: Strategy, kinds: Sequence[str], staging: bool
) -> ExecutionPlan:
    """The plan of `strategy` on processors of `kinds` (per device id); `staging`: one process
    holds every rank's data (a single-rank run)."""
    regions = tuple(
        config.task_regions(node.sig.output_shape)
        for node, config in zip(graph.ops, strategy.configs, strict=True)
    )
    groups = tuple(run_groups(graph, strategy, regions, kinds, staging))
    sole = sole_gradients(graph, strategy, regions, groups)
    fused_tasks = tuple(
        tuple(
            fused_task(graph, group, index, [regions[op][index] for op in group.ops], sole)
            for index in range(strategy[group.ops[0]].num_tasks)
        )
        for group in groups
    )
    internal = frozenset().union(*(group.internal for group in groups))
    output = graph.ops[-1].outputs[0]  # the model's output: the first output of the last op
    contributors = _contributors(graph, strategy)
    in_step = updates_in_step(graph, strategy, groups, fused_tasks, sole, kinds)
    if in_step:
        pieces = {
            p.id: tuple((full_region(p.spec.shape), d) for d in contributors[p.id])
            for p in graph.parameters
        }
    else:
        pieces = update_pieces(graph, strategy, regions)
    update_groups: dict[int, list[tuple[int, Region]]] = {}
    for pid, owned in pieces.items():
        for region, device in owned:
            update_groups.setdefault(device, []).append((pid, region))
    return ExecutionPlan(
        regions=regions,
        groups=groups,
        sole=sole,
        fused_tasks=fused_tasks,
        step_ready=tuple(all(t.step_ready for t in tasks) for tasks in fused_tasks),
        reduced_grads=tuple(
            t.id
            for t in graph.tensors
            if t.spec.dtype.is_float
            and t.producer is not None
            and t.id not in internal
            and t.id != output
        ),
        contributors=contributors,
        updates_in_step=in_step,
        update_groups=update_groups,
        inputs_read_in_step=(
            inputs_read_in_step(graph, strategy, groups, fused_tasks, kinds) if staging else {}
        ),
    )


def _contributors(graph: OperatorGraph, strategy: Strategy) -> dict[int, tuple[int, ...]]:
    devices: dict[int, set[int]] = {p.id: set() for p in graph.parameters}
    for node, config in zip(graph.ops, strategy.configs, strict=True):
        for pid in node.weights:
            devices[pid].update(config.devices)
    return {pid: tuple(sorted(found)) for pid, found in devices.items()}
