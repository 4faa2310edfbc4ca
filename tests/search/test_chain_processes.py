"""MCMC chains run at once in worker processes: the same search, sooner."""

from __future__ import annotations

import importlib

import pytest

from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.mcmc import ChainStatus
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.zoo import load_model


def lenet_context() -> SimContext:
    return SimContext(load_model("lenet").graph(), parse_machine("p100:1"))


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_chains_in_processes_make_the_serial_search(workers):
    serial = search(lenet_context(), budget_s=120, seed=7, max_proposals=450, polish=False)
    statuses: list[ChainStatus] = []
    pooled = search(
        lenet_context(),
        budget_s=120,
        seed=7,
        max_proposals=450,
        polish=False,
        workers=workers,
        on_status=statuses.append,
    )
    assert (pooled.best, pooled.best_s, pooled.proposals) == (
        serial.best,
        serial.best_s,
        serial.proposals,
    )
    for a, b in zip(pooled.chains, serial.chains, strict=True):
        assert (a.init, a.best, a.proposals, a.accepted) == (
            b.init,
            b.best,
            b.proposals,
            b.accepted,
        )
    assert {s.init for s in statuses} == {"dp", "expert", "random"}  # progress crossed over
    assert 0 <= pooled.converged_s <= pooled.seconds
    assert full_simulate(TaskGraph(lenet_context(), pooled.best)).iteration_s == pooled.best_s


def test_chains_at_once_share_the_budget_by_waves():
    # 3 chains, 2 at a time: two waves (two chains, then one), each half the budget
    result = search(lenet_context(), budget_s=0.6, seed=1, polish=False, workers=2)
    assert all(c.seconds <= 0.3 + 0.05 for c in result.chains)
    assert sum(c.seconds for c in result.chains) <= 0.9 + 0.15
    assert len(result.chains_started_s) == 3
    assert result.chains_started_s[2] >= min(result.chains_started_s[:2])


def test_a_failing_chain_is_reported(monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("the chain broke")

    # the package exports `search` the function, so the module is looked up by name
    monkeypatch.setattr(importlib.import_module("flexflow.search.search"), "run_chain", broken)
    with pytest.raises(RuntimeError, match="(?s)an MCMC chain's process failed.*the chain broke"):
        search(lenet_context(), budget_s=1, max_proposals=30, workers=2)
    with pytest.raises(ValueError, match="read time.perf_counter"):
        search(lenet_context(), budget_s=1, workers=2, clock=lambda: 0.0)
