"""The ranks of a run keep one strategy (flexflow.runtime.agreement): each offers its pick as a
row of float64, and every rank decodes the same choice from the same table. The table's trip
through Legate is tests/runtime/test_multirank.py's; these check the rows and the choice."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flexflow.runtime.agreement as agreement
from flexflow import FFConfig
from flexflow.errors import StrategyError
from flexflow.machine import parse_machine
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model

GRAPHS = {
    name: load_model(name, FFConfig(batch_size=8), **sizes).graph()
    for name, sizes in (("lenet", {}), ("rnnlm", {"seq_length": 4}))
}


@settings(max_examples=20, deadline=None)
@given(
    model=st.sampled_from(sorted(GRAPHS)),
    machine=st.sampled_from(["p100:1", "k80:4", "local"]),
    seed=st.integers(0, 1000),
    seconds=st.floats(1e-6, 1e3),
)
def test_a_strategy_survives_its_row(model, machine, seed, seconds):
    graph, machine = GRAPHS[model], parse_machine(machine)
    strategy = named_strategy("random", graph, machine, seed)
    row = agreement.encode(strategy, seconds, graph, machine)
    assert row.shape == (agreement.row_length(graph, machine),)
    assert agreement.decode(row, graph, machine) == (strategy, seconds)


def test_every_rank_keeps_the_fastest_offer_ties_to_the_lowest_rank():
    rows = np.array([[3.0, 1], [2.0, 2], [2.0, 3], [5.0, 4]])
    assert agreement.choose(rows) == 1


def test_agreeing_keeps_another_ranks_faster_pick(monkeypatch):
    graph, machine = GRAPHS["lenet"], parse_machine("p100:1")
    mine = named_strategy("dp", graph, machine)
    theirs = named_strategy("random", graph, machine, 7)
    offered = agreement.encode(theirs, 0.001, graph, machine)
    monkeypatch.setattr(agreement, "gather_rows", lambda row: np.stack([row, offered]))
    kept, note = agreement.agree_on_strategy(graph, machine, mine, 0.002)
    assert kept == theirs
    assert note == "agreed across 2 ranks (simulated ms: 2.000, 1.000): rank 1's"
    kept, _ = agreement.agree_on_strategy(graph, machine, mine, 0.001)  # a tie: rank 0's
    assert kept == mine


def test_a_missing_offer_is_an_error_not_a_guess(monkeypatch):
    graph, machine = GRAPHS["lenet"], parse_machine("p100:1")
    dp = named_strategy("dp", graph, machine)
    missing = np.full(agreement.row_length(graph, machine), -math.inf)
    monkeypatch.setattr(agreement, "gather_rows", lambda row: np.stack([row, missing]))
    with pytest.raises(StrategyError, match="did not all arrive"):
        agreement.agree_on_strategy(graph, machine, dp, 0.002)


def test_one_rank_keeps_its_own_pick_without_a_note(monkeypatch):
    graph, machine = GRAPHS["lenet"], parse_machine("p100:1")
    dp = named_strategy("dp", graph, machine)
    monkeypatch.setattr(agreement, "gather_rows", lambda row: np.asarray(row)[None, :])
    assert agreement.agree_on_strategy(graph, machine, dp, 0.002) == (dp, "")


def test_an_imported_strategy_must_be_the_same_on_every_rank(monkeypatch):
    graph, machine = GRAPHS["lenet"], parse_machine("p100:1")
    dp = named_strategy("dp", graph, machine)
    other = agreement.encode(named_strategy("expert", graph, machine), 0.002, graph, machine)
    same = agreement.encode(dp, 0.002, graph, machine)
    monkeypatch.setattr(agreement, "gather_rows", lambda row: np.stack([row, same]))
    assert agreement.agree_on_strategy(graph, machine, dp, 0.002, imported="s.json") == (dp, "")
    monkeypatch.setattr(agreement, "gather_rows", lambda row: np.stack([row, other, same]))
    with pytest.raises(StrategyError, match=r"s.json holds another strategy on rank\(s\) \[1\]"):
        agreement.agree_on_strategy(graph, machine, dp, 0.002, imported="s.json")
