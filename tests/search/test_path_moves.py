"""Path moves: a one-op proposal extended to a random path of neighbours, all given its configuration."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from flexflow.machine import parse_machine
from flexflow.search import mcmc
from flexflow.search.mcmc import op_neighbours, run_chain
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model
from tests.search.test_neighbour_moves import recorded_chain


@pytest.mark.parametrize("model", ["branching", "lenet", "resnet101"])
def test_every_path_move_gives_one_configuration_to_a_walk_of_neighbours(monkeypatch, model):
    graph, context, space, log, chain = recorded_chain(
        model, monkeypatch, path_moves=1.0, neighbour_moves=0.5
    )
    assert len(log) == chain.proposals > 50
    neighbours = op_neighbours(graph)
    longer = 0
    for path, config, before in log:
        assert len(set(path)) == len(path)  # each op once
        assert all(config in space(op) for op in path)
        assert any(before[op] != config for op in path)
        for a, b in itertools.pairwise(path):  # a walk: each op a neighbour of the one before
            assert b in neighbours[a]
        longer += len(path) > 1
    assert longer > len(log) // 4  # most one-op proposals found a neighbour to go on to
    # the chain's costs are the strategies' simulated costs (one delta for the whole path)
    assert full_simulate(TaskGraph(context, chain.best)).iteration_s == chain.best_s


def test_path_moves_off_are_exactly_the_one_op_proposals(monkeypatch):
    *_, log, chain = recorded_chain("lenet", monkeypatch, path_moves=0.0)
    assert all(len(path) == 1 for path, _, _ in log)
    # the default: half of them on a graph without unrolled layers, none on one with them
    *_, default = recorded_chain("lenet", monkeypatch)
    *_, half = recorded_chain("lenet", monkeypatch, path_moves=mcmc.DEFAULT_PATH_MOVES)
    assert (default.best_s, default.proposals) == (half.best_s, half.proposals)
    assert mcmc.DEFAULT_PATH_MOVES == 0.5
    assert mcmc.path_moves_for(load_model("rnnlm", seq_length=4).graph()) == 0.0
    assert mcmc.path_moves_for(load_model("lenet").graph()) == 0.5


def test_delta_and_full_simulation_make_the_same_chain_with_path_moves(full_simulations):
    graph = load_model("resnet101").graph()
    machine = parse_machine("p100:1")
    space = make_space("soap", graph, machine)
    start = named_strategy("random", graph, machine, 1)
    found = []
    for simulation in ("delta", "full"):
        chain = run_chain(
            SimContext(graph, machine), "random", start, space, np.random.default_rng(5), 1.0,
            max_proposals=120, simulation=simulation, path_moves=1.0,
        )  # fmt: skip
        found.append((chain.best_s, chain.proposals, chain.accepted, chain.best))
        simulated = full_simulations.take()
        assert simulated == (0 if simulation == "delta" else 1 + chain.proposals)
    assert found[0] == found[1]


def test_the_cli_passes_the_path_share_on(capsys):
    from flexflow.cli import main
    from flexflow.search import search

    argv = ["search", "lenet", "--machine", "p100:1", "--proposals", "90", "--seed", "1"]
    assert main([*argv, "--path-moves", "1", "--no-polish", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    graph = load_model("lenet").graph()
    context = SimContext(graph, parse_machine("p100:1"))
    result = search(context, seed=1, max_proposals=90, polish=False, path_moves=1.0)
    assert out["best_iteration_ms"] == pytest.approx(result.best_s * 1e3, rel=1e-12)
    assert out["proposals"] == result.proposals


def test_path_continue_sets_how_far_walks_go(monkeypatch):
    """At 0 a walk stops after its first step; the longer the walks are meant to be, the longer
    they are on a deep chain (ResNet-101's 279 ops)."""
    mean_length = {}
    for value in (0.0, 0.75, 0.97, (0.75, 0.97)):
        graph, *_, log, chain = recorded_chain(
            "resnet101", monkeypatch, path_moves=1.0, neighbour_moves=0.0, path_continue=value
        )
        lengths = [len(path) for path, _, _ in log if len(path) > 1]
        assert len(lengths) > 100
        if value == 0.0:
            assert set(lengths) == {2}
        mean_length[value] = sum(lengths) / len(lengths)
    assert mean_length[0.0] < mean_length[0.75] < mean_length[(0.75, 0.97)] < mean_length[0.97]
    assert mean_length[0.97] > 10
    assert mcmc.PATH_CONTINUE == (0.75, 0.97)  # the default: one of the two per walk


@pytest.mark.parametrize("value", [-0.1, 1.0, 1.5, (0.5, 1.0), (), ["0.5"], [0.5, 1.5]])
def test_path_continue_must_be_a_probability_below_one(value):
    graph = load_model("lenet").graph()
    context = SimContext(graph, parse_machine("p100:1"))
    dp = named_strategy("dp", graph, context.machine)
    space = make_space("soap", graph, context.machine)
    with pytest.raises(mcmc.FlexFlowError, match="path_continue.*in \\[0, 1\\)"):
        run_chain(context, "dp", dp, space, np.random.default_rng(0), 1.0, path_continue=value)


def test_a_list_of_chances_is_taken_and_search_checks_them_before_any_chain():
    graph = load_model("lenet").graph()
    context = SimContext(graph, parse_machine("p100:1"))
    from flexflow.search import search

    listed = search(context, seed=1, max_proposals=60, polish=False, path_continue=[0.75, 0.97])
    tupled = search(context, seed=1, max_proposals=60, polish=False, path_continue=(0.75, 0.97))
    assert (listed.best_s, listed.proposals) == (tupled.best_s, tupled.proposals)
    with pytest.raises(mcmc.FlexFlowError, match="path_continue"):
        search(context, seed=1, max_proposals=60, workers=2, path_continue=1.0)
