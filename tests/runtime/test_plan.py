"""The runtime's plan (flexflow.runtime.plan), read without starting Legate."""

from __future__ import annotations

import pytest

from flexflow import FFConfig
from flexflow.machine import parse_machine
from flexflow.runtime.plan import execution_plan
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


@pytest.mark.parametrize("name", ["dp", "expert", "model", "random"])
def test_every_weight_tile_is_updated_once_and_every_op_runs_in_one_group(name):
    graph = load_model("lenet", FFConfig(batch_size=16)).graph()
    machine = parse_machine("p100:1")
    strategy = named_strategy(name, graph, machine, 3)
    kinds = [kind for kind, _ in machine.kind_ordinals()]
    plan = execution_plan(graph, strategy, kinds, staging=True)
    assert sorted(op for group in plan.groups for op in group.ops) == list(range(len(graph.ops)))
    assert [len(tasks) for tasks in plan.fused_tasks] == [
        strategy[group.ops[0]].num_tasks for group in plan.groups
    ]
    for p in graph.parameters:  # each element of each weight: in exactly one update tile
        tiles = [r for pieces in plan.update_groups.values() for pid, r in pieces if pid == p.id]
        copies = len(plan.contributors[p.id]) if plan.updates_in_step else 1
        volume = sum(_volume(r) for r in tiles)
        assert volume == copies * p.spec.size


def test_data_parallelism_on_cpus_is_one_step_task_per_device_updating_in_it():
    graph = load_model("lenet", FFConfig(batch_size=16)).graph()
    machine = parse_machine("p100:1")
    strategy = named_strategy("dp", graph, machine)
    plan = execution_plan(graph, strategy, ["cpu"] * machine.num_devices, staging=True)
    assert len(plan.groups) == 1 and plan.step_ready == (True,)
    assert plan.updates_in_step and plan.inputs_read_in_step  # the image, from the batch


def _volume(region) -> int:
    size = 1
    for start, stop in region:
        size *= stop - start
    return size
