"""A search with full simulation (paper Table 4's baseline) and the progress stopping rule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flexflow import FFConfig
from flexflow.cli import main
from flexflow.errors import FlexFlowError
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.evaluator import FullEvaluator, make_evaluator
from flexflow.search.mcmc import PROGRESS_FLOOR_PER_OP, layer_groups, run_chain
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def context_of(model: str, machine: str = "p100:1", **options) -> SimContext:
    graph = load_model(model, FFConfig(batch_size=8), **options).graph()
    return SimContext(graph, parse_machine(machine))


def chain(context: SimContext, simulation: str, seed: int, **options):
    graph, machine = context.graph, context.machine
    dp = named_strategy("dp", graph, machine)
    dp_s = full_simulate(TaskGraph(context, dp)).iteration_s
    return run_chain(
        context,
        "random",
        named_strategy("random", graph, machine, seed),
        make_space("soap", graph, machine),
        np.random.default_rng(seed),
        dp_s,
        simulation=simulation,
        **options,
    )


@pytest.mark.parametrize(
    "model, options",
    [
        ("lenet", {}),
        ("rnnlm", {"seq_length": 3, "vocab_size": 64, "embed_size": 16, "hidden_size": 16}),
    ],
)
def test_full_and_delta_simulation_make_the_same_chain(model, options, full_simulations):
    """Both give every strategy the same cost, so a seeded chain accepts the same proposals
    (layer moves included, on the RNN) and ends with the same strategy."""
    delta = chain(context_of(model, **options), "delta", 3, max_proposals=300)
    assert full_simulations.take() == 0
    full = chain(context_of(model, **options), "full", 3, max_proposals=300)
    assert full_simulations.take() == 1 + full.proposals  # the start, then every proposal
    assert (full.best, full.best_s, full.proposals, full.accepted, full.best_at) == (
        delta.best,
        delta.best_s,
        delta.proposals,
        delta.accepted,
        delta.best_at,
    )
    assert [cost for _, cost in full.history] == [cost for _, cost in delta.history]
    if model == "rnnlm":
        assert layer_groups(context_of(model, **options).graph)


def test_a_full_evaluator_reverts_to_the_cost_it_had():
    context = context_of("lenet")
    dp = named_strategy("dp", context.graph, context.machine)
    evaluator = make_evaluator(context, dp, "full")
    assert isinstance(evaluator, FullEvaluator)
    before = evaluator.cost_s
    config = make_space("soap", context.graph, context.machine)(1)[0]
    cost = evaluator.propose(1, config)
    assert cost == full_simulate(TaskGraph(context, dp.replace(1, config))).iteration_s
    assert evaluator.revert() == before and evaluator.strategy == dp
    with pytest.raises(AssertionError, match="without a proposal to undo"):
        evaluator.revert()


def test_the_progress_rule_stops_once_the_last_half_brought_nothing(full_simulations):
    context = context_of("lenet")
    result = chain(context, "delta", 1, patience="progress", max_proposals=1_000_000)
    floor = PROGRESS_FLOOR_PER_OP * len(context.graph.ops)
    assert result.proposals == max(floor, 2 * result.best_at + 1)
    # it counts proposals, not seconds: the same chain with full simulation stops at the same one
    again = chain(context_of("lenet"), "full", 1, patience="progress", max_proposals=1_000_000)
    assert (again.proposals, again.best_s) == (result.proposals, result.best_s)
    assert full_simulations.take() == 1 + again.proposals


def test_unknown_simulation_or_patience_is_a_clear_error():
    context = context_of("lenet")
    dp = named_strategy("dp", context.graph, context.machine)
    with pytest.raises(FlexFlowError, match="unknown simulation 'fast'.*delta, full"):
        make_evaluator(context, dp, "fast")
    with pytest.raises(FlexFlowError, match="unknown patience 'never'.*budget, progress"):
        chain(context, "delta", 0, patience="never")


def test_search_with_full_simulation_returns_the_delta_search_s_strategy(capsys, full_simulations):
    delta = search(context_of("lenet"), budget_s=60, seed=5, max_proposals=240)
    assert full_simulations.take() == 0
    full = search(context_of("lenet"), budget_s=60, seed=5, max_proposals=240, simulation="full")
    assert full_simulations.take() > full.proposals + len(full.chains)  # and the descent's
    chains_only = search(
        context_of("lenet"), budget_s=60, seed=5, max_proposals=240, simulation="full", polish=False
    )
    assert full_simulations.take() == chains_only.proposals + len(chains_only.chains)
    assert (full.best, full.best_s, full.proposals) == (delta.best, delta.best_s, delta.proposals)
    argv = [
        "search",
        "lenet",
        "--machine",
        "p100:1",
        "--proposals",
        "90",
        "--seed",
        "1",
        "--json",
        "--workers",
        "1",
    ]  # fmt: skip  (in this process, where the simulations are counted)
    assert main(argv) == 0
    by_delta = json.loads(capsys.readouterr().out)
    assert full_simulations.take() == 0
    assert main([*argv, "--simulation", "full"]) == 0
    by_full = json.loads(capsys.readouterr().out)
    assert full_simulations.take() >= by_full["proposals"]
    for key in ("best_iteration_ms", "proposals", "acceptance_rate"):
        assert by_full[key] == by_delta[key]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--simulation", "fast"])
    assert exit_.value.code == 2 and "invalid choice: 'fast'" in capsys.readouterr().err
