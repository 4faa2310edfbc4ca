"""Layer moves: an unrolled layer's steps reconfigured together, evaluated exactly, undone exactly."""

from __future__ import annotations

import numpy as np

from flexflow import FFConfig
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.evaluator import Evaluator
from flexflow.search.mcmc import layer_groups, run_chain
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def rnn_context() -> SimContext:
    model = load_model(
        "rnnlm", FFConfig(batch_size=8), seq_length=4, vocab_size=64, embed_size=16, hidden_size=16
    )
    return SimContext(model.graph(), parse_machine("p100:1"))


def test_layer_groups_are_the_lstm_steps():
    context = rnn_context()
    groups = layer_groups(context.graph)
    assert len(groups) == 2  # two LSTM layers of 4 steps each
    for group in groups:
        kinds = {context.graph.ops[op].op.kind for op in group}
        layers = {context.graph.ops[op].layer for op in group}
        assert kinds == {"lstm"} and len(layers) == 1 and len(group) == 4
    assert layer_groups(load_model("lenet").graph()) == ()  # nothing unrolled: no layer moves


def test_a_layer_move_is_simulated_exactly_and_reverts_exactly():
    context = rnn_context()
    dp = named_strategy("dp", context.graph, context.machine)
    evaluator = Evaluator(context, dp)
    before = evaluator.cost_s
    group = layer_groups(context.graph)[0]
    config = make_space("soap", context.graph, context.machine)(group[0])[3]
    cost = evaluator.propose_many(group, config)
    assert all(evaluator.strategy[op] == config for op in group)
    assert cost == full_simulate(TaskGraph(context, evaluator.strategy)).iteration_s
    assert evaluator.revert() == before and evaluator.strategy == dp
    # a one-op delta after a layer move still matches a full simulation
    evaluator.propose_many(group, config)
    evaluator.propose(0, make_space("soap", context.graph, context.machine)(0)[1])
    assert evaluator.cost_s == full_simulate(TaskGraph(context, evaluator.strategy)).iteration_s


def test_chains_with_layer_moves_report_the_true_cost_of_their_best():
    context = rnn_context()
    space = make_space("soap", context.graph, context.machine)
    dp = named_strategy("dp", context.graph, context.machine)
    dp_s = full_simulate(TaskGraph(context, dp)).iteration_s
    chain = run_chain(
        context,
        "dp",
        dp,
        space,
        np.random.default_rng(0),
        dp_s,
        max_proposals=200,
        layer_moves=0.5,
    )
    assert chain.best_s <= chain.initial_s
    assert full_simulate(TaskGraph(context, chain.best)).iteration_s == chain.best_s
    result = search(context, budget_s=60, seed=2, max_proposals=300)
    assert full_simulate(TaskGraph(context, result.best)).iteration_s == result.best_s
