"""Choosing a training run's strategy at compile time (`flexflow.planning`)."""

from __future__ import annotations

import pytest

from flexflow import FFConfig
from flexflow.errors import FlexFlowError, StrategyError
from flexflow.machine import parse_machine
from flexflow.planning import plan_strategy
from flexflow.strategy_file import load_strategy
from flexflow.zoo import load_model


def lenet(batch: int):
    return load_model("lenet", FFConfig(batch_size=batch)).graph()


def test_data_parallelism_says_when_the_batch_leaves_devices_idle():
    machine = parse_machine("p100:1")  # 4 GPUs
    plan = plan_strategy(lenet(6), machine)
    assert max(c.num_tasks for c in plan.strategy.configs) == 3
    assert "on 3 of 4 devices: batch 6 does not split over 4" in plan.describe()
    assert "divisible by 4" in plan.source
    whole = plan_strategy(lenet(8), machine)
    assert whole.source == "data parallelism (no --budget given)"


def test_a_search_is_exported_and_imports_to_the_same_strategy(tmp_path):
    graph, machine = lenet(8), parse_machine("p100:1")
    path = tmp_path / "s.json"
    searched = plan_strategy(graph, machine, budget_s=1.0, export_path=path, model_name="lenet")
    assert searched.source.startswith("searched for 1 s")
    assert searched.simulated_ms <= searched.dp_simulated_ms
    imported = plan_strategy(graph, machine, import_path=path)
    assert imported.strategy == searched.strategy == load_strategy(path, graph, machine)
    assert imported.simulated_ms == searched.simulated_ms


@pytest.mark.parametrize(
    "options, match",
    [
        ({"budget_s": 1.0, "import_path": "s.json"}, "either --import-strategy or --budget"),
        ({"budget_s": -1.0}, "--budget must be >= 0 seconds, got -1.0"),
    ],
)
def test_conflicting_or_negative_choices_are_errors(options, match):
    with pytest.raises(StrategyError, match=match):
        plan_strategy(lenet(8), parse_machine("p100:1"), **options)


@pytest.mark.parametrize(
    "options, match",
    [
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"epochs": 1.5}, "epochs must be a positive integer, got 1.5"),
        ({"learning_rate": 0.0}, "learning_rate must be positive"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"search_budget": -2.0}, "search_budget must be >= 0 seconds"),
    ],
)
def test_a_bad_training_configuration_names_the_field(options, match):
    with pytest.raises(FlexFlowError, match=match):
        FFConfig(**options)
