"""The OptCNN baseline: exact on chains and series-parallel graphs, valid strategies for every zoo model."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from flexflow import FFConfig, FFModel
from flexflow.cli import main
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.optcnn import additive_cost_s, optcnn, optcnn_configs, optcnn_strategy
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.space import degree_choices
from flexflow.strategy import Strategy
from flexflow.strategy_file import validate_strategy
from flexflow.zoo import ZOO, load_model


def chain_context() -> SimContext:
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 1024))
    model.softmax(model.dense(model.relu(model.dense(x, 4096)), 1024))
    return SimContext(model.graph(), parse_machine("p100:1"))


def residual_context() -> SimContext:
    """dense -> relu -> add(dense, relu) -> softmax: not a chain, but elimination removes it all."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 1024))
    hidden = model.dense(x, 4096)
    model.softmax(model.add(hidden, model.relu(hidden)))
    return SimContext(model.graph(), parse_machine("p100:1"))


def brute_force_s(context: SimContext) -> float:
    """The minimum of the additive cost over every combination of OptCNN configurations."""
    graph = context.graph
    choices = [optcnn_configs(context, op) for op in range(len(graph.ops))]
    names = tuple(n.name for n in graph.ops)
    return min(
        additive_cost_s(context, Strategy(names, configs))
        for configs in itertools.product(*choices)
    )


@pytest.mark.parametrize("make_context", [chain_context, residual_context])
def test_dynamic_programming_is_exact_against_brute_force(make_context):
    context = make_context()
    result = optcnn(context)
    assert result.exact
    assert result.cost_s == pytest.approx(brute_force_s(context), rel=1e-12)
    assert result.cost_s == additive_cost_s(context, result.strategy)
    # large weights: the optimum is not the trivial one (it splits some op)
    assert any(config.num_tasks > 1 for config in result.strategy.configs)


def test_configs_are_degree_tuples_on_devices_from_zero():
    context = chain_context()
    strategy = optcnn_strategy(context)
    for node, config in zip(context.graph.ops, strategy.configs, strict=True):
        assert config.degrees in degree_choices(node.sig, context.num_devices)
        assert config.devices == tuple(range(math.prod(config.degrees)))


def test_unrolled_lstm_grid_falls_back_to_the_heuristic():
    context = SimContext(load_model("rnnlm").graph(), parse_machine("p100:1"))
    result = optcnn(context)
    assert not result.exact
    assert result.cost_s == additive_cost_s(context, result.strategy)


@pytest.mark.parametrize("machine", ["p100:1", "k80:1"])
def test_strategy_is_valid_for_every_zoo_model(machine):
    for name in ZOO:
        graph = load_model(name).graph()
        context = SimContext(graph, parse_machine(machine))
        strategy = optcnn_strategy(context)
        validate_strategy(strategy, graph, context.machine)
        for config in strategy.configs:
            assert config.devices == tuple(range(config.num_tasks))


def test_search_reports_the_simulated_cost_of_the_optcnn_strategy():
    context = chain_context()
    result = search(context, space="optcnn")
    assert result.chains == () and result.proposals == 0
    assert result.best == optcnn_strategy(context)
    assert result.best_s == full_simulate(TaskGraph(context, result.best)).iteration_s


def test_cli_search_with_the_optcnn_space(capsys):
    code = main(["search", "lenet", "--machine", "p100:1", "--space", "optcnn", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["space"] == "optcnn" and out["proposals"] == 0 and out["acceptance_rate"] == 0
    for key in ("best_iteration_ms", "dp_iteration_ms", "speedup_over_dp", "search_seconds"):
        assert key in out
