"""Neighbour moves: a one-op proposal that gives the op a neighbour's current configuration."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.search import mcmc
from flexflow.search.mcmc import op_neighbours, run_chain
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def branching_model() -> FFModel:
    """x -> a -> (b, c) -> add -> d: the add reads two ops, a is read by two."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16), name="x")
    a = model.dense(x, 16, ActiMode.AC_MODE_RELU, name="a")
    b = model.dense(a, 16, name="b")
    c = model.dense(a, 16, name="c")
    model.dense(model.add(b, c, name="add"), 4, name="d")
    return model


def test_neighbours_are_the_ops_read_and_the_ops_reading():
    graph = branching_model().graph()
    ids = {node.name: node.id for node in graph.ops}
    neighbours = op_neighbours(graph)
    named = {node.name: {graph.ops[n].name for n in neighbours[node.id]} for node in graph.ops}
    assert named == {
        "a": {"b", "c"},
        "b": {"a", "add"},
        "c": {"a", "add"},
        "add": {"b", "c", "d"},
        "d": {"add"},
    }
    assert all(list(n) == sorted(n) for n in neighbours) and len(ids) == 5
    lenet = load_model("lenet").graph()
    chain = op_neighbours(lenet)
    assert chain[0] == (1,) and chain[-1] == (len(lenet.ops) - 2,)
    assert all(chain[i] == (i - 1, i + 1) for i in range(1, len(lenet.ops) - 1))


class Recording:
    """An evaluator that records every proposal, (its ops, config, strategy it was made from)."""

    def __init__(self, inner, log: list) -> None:
        self._inner, self._log = inner, log

    def propose(self, op, config, cutoff=math.inf):
        self._log.append(((op,), config, self._inner.strategy))
        return self._inner.propose(op, config, cutoff)

    def propose_many(self, ops, config, cutoff=math.inf):
        self._log.append((tuple(ops), config, self._inner.strategy))
        return self._inner.propose_many(ops, config, cutoff)

    def __getattr__(self, name):
        return getattr(self._inner, name)


def recorded_chain(model: str, monkeypatch, **moves):
    """A 300-proposal chain on p100:1 from a random strategy, every proposal recorded:
    (graph, context, space, log, chain)."""
    graph = (branching_model() if model == "branching" else load_model(model)).graph()
    context = SimContext(graph, parse_machine("p100:1"))
    space = make_space("soap", graph, context.machine)
    log: list = []
    real = mcmc.make_evaluator
    monkeypatch.setattr(mcmc, "make_evaluator", lambda *args: Recording(real(*args), log))
    start = named_strategy("random", graph, context.machine, 3)
    dp_s = full_simulate(
        TaskGraph(context, named_strategy("dp", graph, context.machine))
    ).iteration_s
    chain = run_chain(
        context, "random", start, space, np.random.default_rng(0), dp_s, max_proposals=300,
        **moves,
    )  # fmt: skip
    return graph, context, space, log, chain


@pytest.mark.parametrize("model", ["branching", "lenet"])
def test_every_neighbour_move_takes_a_valid_neighbours_configuration(monkeypatch, model):
    graph, context, space, log, chain = recorded_chain(
        model, monkeypatch, neighbour_moves=1.0, path_moves=0.0
    )
    assert len(log) == chain.proposals > 100  # it may stop once half made no progress
    neighbours = op_neighbours(graph)
    uniform = 0
    for (op,), config, before in log:
        valid = set(space(op))
        assert config in valid and config != before[op]
        taken = {before[n] for n in neighbours[op]} & valid
        if taken:  # a neighbour's configuration fits: the move takes one of them
            assert config in taken
        else:  # none does (e.g. a flat between 4-D and 2-D ops): a uniform draw
            uniform += 1
    assert uniform < len(log)
    assert full_simulate(TaskGraph(context, chain.best)).iteration_s == chain.best_s


@pytest.mark.parametrize(("share", "value"), [("neighbour_moves", 1.5), ("path_moves", -0.5)])
def test_the_share_must_be_a_probability(share, value):
    graph = load_model("lenet").graph()
    context = SimContext(graph, parse_machine("p100:1"))
    dp = named_strategy("dp", graph, context.machine)
    space = make_space("soap", graph, context.machine)
    with pytest.raises(mcmc.FlexFlowError, match=share):
        run_chain(context, "dp", dp, space, np.random.default_rng(0), 1.0, **{share: value})


@pytest.mark.parametrize("share", ["0", "1"])
def test_the_cli_passes_the_share_on(capsys, share):
    """`flexflow search --neighbour-moves S` finds what `search(..., neighbour_moves=S)` does."""
    from flexflow.cli import main
    from flexflow.search import search

    argv = ["search", "lenet", "--machine", "p100:1", "--proposals", "90", "--seed", "1"]
    assert main([*argv, "--neighbour-moves", share, "--no-polish", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    graph = load_model("lenet").graph()
    context = SimContext(graph, parse_machine("p100:1"))
    result = search(context, seed=1, max_proposals=90, polish=False, neighbour_moves=float(share))
    assert out["best_iteration_ms"] == pytest.approx(result.best_s * 1e3, rel=1e-12)
    assert out["proposals"] == result.proposals


@pytest.mark.parametrize("bad", ["-0.1", "1.5", "half"])
def test_a_share_outside_0_1_is_a_usage_error(capsys, bad):
    from flexflow.cli import main

    with pytest.raises(SystemExit) as info:
        main(["search", "lenet", "--machine", "p100:1", "--neighbour-moves", bad])
    assert info.value.code == 2
    assert "argument --neighbour-moves: expected a number in [0, 1]" in capsys.readouterr().err
