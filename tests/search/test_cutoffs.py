"""Proposals cut short: a delta simulation stops once its bounds show the proposal is slower
than the cost it had to beat, and the search decides exactly as if it had simulated it whole."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flexflow import FFConfig
from flexflow.machine import parse_machine
from flexflow.search import mcmc
from flexflow.search.evaluator import Evaluator
from flexflow.search.local import improving_neighbours
from flexflow.search.mcmc import DEFAULT_BETA, acceptance_cutoff, run_chain
from flexflow.search.scan import RELATIVE_TOLERANCE
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def context_of(model: str, machine: str, **options) -> SimContext:
    graph = load_model(model, FFConfig(batch_size=16), **options).graph()
    return SimContext(graph, parse_machine(machine))


@given(
    current=st.floats(1e-4, 10.0),
    draw=st.floats(0.0, 1.0, exclude_max=True),
    beta=st.floats(1.0, 1000.0),
    reference=st.floats(1e-4, 10.0),
)
def test_the_cutoff_separates_the_costs_the_draw_rejects(current, draw, beta, reference):
    cutoff = acceptance_cutoff(current, draw, beta, reference)
    if draw == 0.0:
        assert cutoff == math.inf
        return
    assert cutoff >= current
    above = cutoff * (1 + 1e-12)  # a cost the simulation may cut: the draw rejects it
    assert not draw < math.exp(beta * (current - above) / reference)
    threshold = current - math.log(draw) * reference / beta
    if threshold - current > 1e-6 * current:  # wider than rounding: a cost below is accepted
        below = (current + threshold) / 2
        assert draw < math.exp(beta * (current - below) / reference) and below < cutoff


@pytest.mark.parametrize(
    "model, machine, start, options",
    [
        ("lenet", "p100:4", "random", {}),
        ("alexnet", "p100:1", "dp", {"image_size": 67}),
        ("rnnlm", "p100:1", "random", {"seq_length": 3, "vocab_size": 64, "hidden_size": 16}),
    ],
)
def test_a_chain_with_cut_proposals_is_the_chain_simulated_whole(
    model, machine, start, options, monkeypatch
):
    """The same seeded chain with and without cutoffs: the same proposals accepted and the
    same strategy, while many proposals were cut short."""
    context = context_of(model, machine, **options)
    graph, m = context.graph, context.machine
    dp_s = full_simulate(TaskGraph(context, named_strategy("dp", graph, m))).iteration_s
    cut = []
    propose, propose_many = Evaluator.propose, Evaluator.propose_many

    def counting(method):
        def wrapper(self, *args):
            cost = method(self, *args)
            cut.append(cost == math.inf)
            return cost

        return wrapper

    def run():
        return run_chain(
            context,
            start,
            named_strategy(start, graph, m, seed=1),
            make_space("soap", graph, m),
            np.random.default_rng(1),
            dp_s,
            DEFAULT_BETA,
            max_proposals=400,
        )

    monkeypatch.setattr(Evaluator, "propose", counting(propose))
    monkeypatch.setattr(Evaluator, "propose_many", counting(propose_many))
    with_cuts = run()
    cuts = sum(cut)
    monkeypatch.setattr(mcmc, "acceptance_cutoff", lambda *args: math.inf)
    whole = run()
    assert (with_cuts.best, with_cuts.best_s, with_cuts.accepted, with_cuts.best_at) == (
        whole.best,
        whole.best_s,
        whole.accepted,
        whole.best_at,
    )
    assert [cost for _, cost in with_cuts.history] == [cost for _, cost in whole.history]
    assert cuts > 50  # most rejected proposals stop early


def test_check_local_finds_every_faster_neighbour_a_full_simulation_finds():
    """Scans cut slower neighbours short: the faster ones listed are exactly those found by
    simulating every neighbour whole."""
    context = context_of("lenet", "p100:2")
    graph, m = context.graph, context.machine
    strategy = named_strategy("expert", graph, m)
    space = make_space("soap", graph, m)
    base, listed = improving_neighbours(context, strategy, space)
    expected = {}
    for op in range(len(graph.ops)):
        for config in space(op):
            if config != strategy[op]:
                changed = strategy.replace(op, config)
                cost = full_simulate(TaskGraph(context, changed)).iteration_s
                if cost < base * (1 - RELATIVE_TOLERANCE):
                    expected[(graph.ops[op].name, config)] = cost
    assert expected
    assert {(n.op, n.config): n.iteration_s for n in listed} == pytest.approx(expected, rel=1e-12)


def test_a_chain_whose_load_bounds_reject_proposals_is_the_chain_simulated_whole(monkeypatch):
    """AlexNet from a random strategy: many proposals overload a device and are rejected by
    their load bound before any task graph is built; the chain is the one made without the
    bound, and the one made without any cutoff."""
    context = context_of("alexnet", "p100:1")
    graph, m = context.graph, context.machine
    dp_s = full_simulate(TaskGraph(context, named_strategy("dp", graph, m))).iteration_s
    bounded = []
    above = Evaluator._above

    def counting(self, changes, cutoff):
        bounded.append(above(self, changes, cutoff))
        return bounded[-1]

    def run():
        return run_chain(
            context,
            "random",
            named_strategy("random", graph, m, seed=3),
            make_space("soap", graph, m),
            np.random.default_rng(3),
            dp_s,
            DEFAULT_BETA,
            max_proposals=300,
        )

    monkeypatch.setattr(Evaluator, "_above", counting)
    with_bounds = run()
    assert sum(bounded) > 30
    monkeypatch.setattr(TaskGraph, "load_bound", lambda self, changes: 0.0)
    without = run()
    monkeypatch.setattr(mcmc, "acceptance_cutoff", lambda *args: math.inf)
    whole = run()
    for other in (without, whole):
        assert (with_bounds.best, with_bounds.best_s, with_bounds.accepted) == (
            other.best,
            other.best_s,
            other.accepted,
        )
        assert [cost for _, cost in with_bounds.history] == [cost for _, cost in other.history]


def test_a_proposal_its_load_bound_rejects_changes_nothing():
    """Rejected by its load bound, a proposal costs inf until `revert`, which leaves the
    strategy, the task graph and the schedule as they were; only `revert` may follow it."""
    context = context_of("lenet", "p100:1")
    graph, m = context.graph, context.machine
    strategy = named_strategy("dp", graph, m)
    evaluator = Evaluator(context, strategy)
    before = (evaluator.cost_s, list(evaluator._delta.schedule.end))
    heavy = max(range(len(graph.ops)), key=lambda op: graph.ops[op].sig.output_shape[-1])
    single = next(c for c in make_space("soap", graph, m)(heavy) if len(c.devices) == 1)
    assert evaluator.propose(heavy, single, cutoff=1e-9) == math.inf
    assert evaluator.cost_s == math.inf and evaluator.strategy == strategy
    with pytest.raises(AssertionError, match="reverted first"):
        evaluator.propose(heavy, single, cutoff=1e-9)
    assert evaluator.revert() == before[0]
    assert (evaluator.cost_s, list(evaluator._delta.schedule.end)) == before
    assert (
        evaluator.propose(heavy, single)
        == full_simulate(TaskGraph(context, strategy.replace(heavy, single))).iteration_s
    )
