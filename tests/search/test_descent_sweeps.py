"""The descent's narrow sweeps (neighbours' configurations only) and its proving wide sweep."""

from __future__ import annotations

import pytest

from flexflow import FFConfig
from flexflow.machine import parse_machine
from flexflow.search import local
from flexflow.search.local import descend, improving_neighbours
from flexflow.search.mcmc import op_neighbours
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model

RNNLM = {"seq_length": 3, "vocab_size": 64, "embed_size": 16, "hidden_size": 16}


def context_of(model: str, **options) -> SimContext:
    graph = load_model(model, FFConfig(batch_size=8), **options).graph()
    return SimContext(graph, parse_machine("p100:1"))


def spy_on_scans(monkeypatch) -> list[tuple[int, tuple | None, tuple]]:
    """Every scan a descent starts: (op, the configurations asked for, the strategy's configs)."""
    scans = []
    make = local.make_scanner

    def spying(*args, **kwargs):
        scanner = make(*args, **kwargs)
        start = scanner.start

        def recorded(op, configs=None):
            scans.append((op, configs, scanner.strategy.configs))
            start(op, configs)

        scanner.start = recorded
        return scanner

    monkeypatch.setattr(local, "make_scanner", spying)
    return scans


@pytest.mark.parametrize("model, options, seed", [("lenet", {}, 3), ("rnnlm", RNNLM, 1)])
def test_narrow_sweeps_try_the_neighbours_configurations_and_a_wide_sweep_ends_it(
    monkeypatch, model, options, seed
):
    context = context_of(model, **options)
    graph, machine = context.graph, context.machine
    space = make_space("soap", graph, machine)
    adjacent = op_neighbours(graph)
    scans = spy_on_scans(monkeypatch)
    descent = descend(context, named_strategy("random", graph, machine, seed), space)
    assert descent.finished and descent.improved_at_s is not None
    assert scans[0][1] is not None  # it starts narrow
    narrow = [scan for scan in scans if scan[1] is not None]
    assert any(configs for _, configs, _ in narrow)  # some narrow sweep had something to try
    for op, configs, current in narrow:
        theirs = [current[n] for n in adjacent[op]]
        expected = [c for c in dict.fromkeys(theirs) if c != current[op] and c in space(op)]
        assert list(configs) == expected
    proof = scans[-len(graph.ops) :]  # the last sweep is wide, every op once
    assert all(configs is None for _, configs, _ in proof)
    assert sorted(op for op, _, _ in proof) == list(range(len(graph.ops)))
    assert improving_neighbours(context, descent.strategy, space)[1] == []


def test_without_narrow_sweeps_every_scan_is_wide(monkeypatch):
    context = context_of("lenet")
    graph, machine = context.graph, context.machine
    space = make_space("soap", graph, machine)
    scans = spy_on_scans(monkeypatch)
    descent = descend(context, named_strategy("random", graph, machine, 3), space, narrow=False)
    assert descent.finished and scans
    assert all(configs is None for _, configs, _ in scans)
    assert improving_neighbours(context, descent.strategy, space)[1] == []


def test_the_cli_turns_narrow_sweeps_off_on_request(monkeypatch, capsys):
    import importlib

    from flexflow.cli import main

    search_module = importlib.import_module("flexflow.search.search")  # not the function

    seen = []

    def recording(*args, **kwargs):
        seen.append(args[-1])  # search passes the descent's arguments in order, narrow last
        return descend(*args, **kwargs)

    monkeypatch.setattr(search_module, "descend", recording)
    argv = ["search", "lenet", "--machine", "p100:1", "--proposals", "60", "--json"]
    assert main(argv) == 0 and main([*argv, "--no-narrow-sweeps"]) == 0
    assert seen == [True, False]
    capsys.readouterr()
