"""Choosing a training run's strategy at compile time (`flexflow.planning`)."""

from __future__ import annotations

import math

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
    assert whole.source == "data parallelism (no search: a budget of 0 s)"


def test_a_search_is_exported_and_imports_to_the_same_strategy(tmp_path):
    graph, machine = lenet(8), parse_machine("p100:1")
    path = tmp_path / "s.json"
    searched = plan_strategy(graph, machine, budget_s=1.0, export_path=path, model_name="lenet")
    assert searched.source.startswith("searched for ") and "of a 1 s budget" in searched.source
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
        ({"batch_size": 0}, r"batch_size \(--batch-size\) must be a positive integer, got 0"),
        ({"epochs": 1.5}, r"epochs \(--epochs\) must be a positive integer, got 1.5"),
        ({"learning_rate": 0.0}, r"learning_rate \(--lr\) must be a positive number"),
        ({"seed": -1}, r"seed \(--seed\) must be an integer >= 0, got -1"),
        ({"search_budget": -2.0}, r"search_budget \(--budget\) must be a finite number of sec"),
        ({"search_budget": math.inf}, r"search_budget \(--budget\) must be a finite .* got inf"),
        (
            {"search_budget": 1.0, "import_strategy": "s.json"},
            r"either import_strategy \(--import-strategy\) or search_budget \(--budget\), not both",
        ),
    ],
)
def test_a_bad_training_configuration_names_the_field_and_its_flag(options, match):
    with pytest.raises(FlexFlowError, match=match):
        FFConfig(**options)


def test_close_candidates_are_distinct_and_within_the_margin_of_the_fastest(monkeypatch):
    import flexflow.planning as planning
    from flexflow.strategies import named_strategy

    graph, machine = lenet(8), parse_machine("p100:1")
    context = planning.planning_context(graph, machine)
    dp = named_strategy("dp", graph, machine)
    monkeypatch.setattr(planning, "TRIAL_MARGIN", 1e9)
    everyone = planning.close_candidates(context, graph, machine, dp, dp)
    # the search's pick is data parallelism: named once, by the first label
    assert [c.label for c in everyone].count("searched") == 1
    assert "data parallelism" not in [c.label for c in everyone]
    assert len({c.strategy for c in everyone}) == len(everyone) == 3
    times = [c.simulated_ms for c in everyone]
    assert times == sorted(times) and all(c.measured_ms is None for c in everyone)
    monkeypatch.setattr(planning, "TRIAL_MARGIN", 0.0)
    (fastest,) = planning.close_candidates(context, graph, machine, dp, dp)
    assert fastest.simulated_ms == times[0]


def test_a_search_keeps_the_fastest_measured_close_candidate(monkeypatch, tmp_path):
    import flexflow.planning as planning

    graph, machine = lenet(8), parse_machine("p100:1")
    calls = []

    def measure(candidates, budget_s):
        calls.append(([c.label for c in candidates], budget_s))
        return [1.0 + i for i in range(len(candidates))][::-1]  # the last is the fastest

    monkeypatch.setattr(planning, "TRIAL_MARGIN", 1e9)
    path = tmp_path / "s.json"
    plan = plan_strategy(graph, machine, budget_s=0.5, export_path=path, measure=measure)
    ((labels, budget),) = calls
    assert budget == 0.5 and len(labels) == len(plan.trials) >= 2
    kept = plan.trials[-1]
    assert kept.measured_ms == 1000.0 and plan.strategy == kept.strategy
    assert [c.measured_ms for c in plan.trials] == [
        1e3 * (len(labels) - i) for i in range(len(labels))
    ]
    assert f"kept {kept.label}" in plan.source
    assert load_strategy(path, graph, machine) == kept.strategy  # the export is the kept one
    # no search, or a single close candidate: nothing is timed
    assert plan_strategy(graph, machine, measure=measure).trials == ()
    monkeypatch.setattr(planning, "TRIAL_MARGIN", 0.0)  # the fastest alone is close
    assert plan_strategy(graph, machine, budget_s=0.5, measure=measure).trials == ()
    assert len(calls) == 1


def test_the_ranks_agreed_strategy_is_the_one_kept_and_exported(tmp_path):
    from flexflow.strategies import named_strategy

    graph, machine = lenet(8), parse_machine("p100:1")
    theirs = named_strategy("expert", graph, machine)
    offers = []

    def agree(strategy, simulated_s):
        offers.append((strategy, simulated_s))
        return theirs, "agreed across 2 ranks: rank 1's"

    path = tmp_path / "s.json"
    plan = plan_strategy(graph, machine, budget_s=0.3, export_path=path, agree=agree)
    ((offered, offered_s),) = offers
    assert offered_s > 0 and offered_s * 1e3 <= plan.dp_simulated_ms
    assert plan.strategy == theirs == load_strategy(path, graph, machine)
    assert plan.source.endswith("; agreed across 2 ranks: rank 1's")
    assert plan_strategy(graph, machine, agree=agree).strategy != theirs  # no search: no offer
    assert len(offers) == 1


def test_no_trials_where_timing_the_candidates_would_far_outlast_the_budget(monkeypatch):
    import flexflow.planning as planning

    graph, machine = lenet(8), parse_machine("p100:1")
    monkeypatch.setattr(planning, "TRIAL_MARGIN", 1e9)
    calls = []

    def measure(candidates, budget_s):
        calls.append(budget_s)
        return [1.0] * len(candidates)

    # LeNet's candidates simulate at a few ms per iteration on p100:1 (a step per launch on
    # GPUs): three launches each take a few hundredths of a second, far past a 0.1 ms budget
    skipped = plan_strategy(graph, machine, budget_s=1e-4, measure=measure)
    assert skipped.trials == () and calls == []
    assert "close candidates not timed" in skipped.source and "give --budget" in skipped.source
    assert plan_strategy(
        graph, machine, budget_s=0.3, measure=measure, steps_per_execution=8
    ).trials
    assert calls == [0.3]


def test_every_rank_checks_an_imported_strategy_against_the_others(tmp_path):
    from flexflow.strategies import named_strategy
    from flexflow.strategy_file import export_strategy

    graph, machine = lenet(8), parse_machine("p100:1")
    path = tmp_path / "s.json"
    export_strategy(path, named_strategy("expert", graph, machine), graph, machine)
    checked = []

    def agree(strategy, simulated_s, imported=None):
        checked.append((strategy, imported))
        return strategy, ""

    plan = plan_strategy(graph, machine, import_path=path, agree=agree)
    assert checked == [(plan.strategy, str(path))]


def test_the_trials_table_marks_the_fastest_measured():
    from rich.console import Console

    from flexflow.planning import Candidate, trials_table
    from flexflow.strategies import named_strategy

    graph, machine = lenet(8), parse_machine("p100:1")
    dp = named_strategy("dp", graph, machine)
    trials = [Candidate("searched", dp, 1.0, 3.0), Candidate("one device", dp, 1.2, 2.5)]
    console = Console(width=120, record=True)
    console.print(trials_table(trials))
    rows = [line for line in console.export_text().splitlines() if "│" in line]
    assert any("one device" in line and "2.500" in line and "*" in line for line in rows)
    assert any("searched" in line and "*" not in line for line in rows)


def test_a_resumed_run_keeps_its_checkpoints_strategy_unless_a_file_is_imported(tmp_path):
    from flexflow.strategies import named_strategy
    from flexflow.strategy_file import export_strategy

    graph, machine = lenet(8), parse_machine("p100:1")
    resumed = named_strategy("random", graph, machine, 5)
    timed = []
    plan = plan_strategy(
        graph, machine, budget_s=5.0, resumed=resumed, measure=lambda c, b: timed.append(c)
    )
    assert plan.strategy == resumed and timed == []  # neither searched nor timed
    assert plan.source.startswith("the checkpoint's") and "no search" in plan.source
    path = tmp_path / "s.json"
    export_strategy(path, named_strategy("expert", graph, machine), graph, machine)
    imported = plan_strategy(graph, machine, import_path=path, resumed=resumed)
    assert imported.strategy == load_strategy(path, graph, machine)
    checked = []
    plan_strategy(graph, machine, resumed=resumed, agree=lambda *a, **k: checked.append(k))
    assert checked == [{"imported": "the checkpoint"}]


def test_a_named_strategy_can_be_imported_by_name(tmp_path, monkeypatch):
    """`--import-strategy dp` (what a resumed run on other processors needs) read a file 'dp'."""
    from flexflow.strategies import named_strategy

    monkeypatch.chdir(tmp_path)
    graph, machine = lenet(8), parse_machine("p100:1")
    plan = plan_strategy(graph, machine, import_path="expert")
    assert plan.strategy == named_strategy("expert", graph, machine)
    assert plan.source == "the named strategy 'expert'"
    (tmp_path / "dp").write_text("{}")  # a file of that name is the file
    with pytest.raises(StrategyError, match=r"strategy file 'dp': not a strategy file"):
        plan_strategy(graph, machine, import_path="dp")
