"""Progress of the long parts of a search: the chains, the final descent, check-local."""

from __future__ import annotations

import io
import itertools

from rich.console import Console

import flexflow.search.scan
from flexflow.cli_search import cmd_check_local
from flexflow.machine import parse_machine
from flexflow.search.local import DescentStatus, descend
from flexflow.search.progress import search_with_progress
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def lenet_context() -> SimContext:
    return SimContext(load_model("lenet").graph(), parse_machine("p100:1"))


def test_the_descent_reports_its_way_to_the_proof():
    context = lenet_context()
    graph, machine = context.graph, context.machine
    statuses: list[DescentStatus] = []
    start = named_strategy("model", graph, machine)
    descent = descend(context, start, make_space("soap", graph, machine), on_status=statuses.append)
    assert descent.finished
    last = statuses[-1]
    assert last.unchanged == last.num_ops == len(graph.ops)  # the proof's sweep is complete
    assert last.wide and not statuses[0].wide  # narrow sweeps first, a wide one proves
    assert last.cost_s == full_simulate(TaskGraph(context, descent.strategy)).iteration_s
    assert last.improvements >= 1  # the model-parallel start was improvable
    assert [s.neighbours for s in statuses] == sorted(s.neighbours for s in statuses)
    assert all(b.cost_s <= a.cost_s for a, b in itertools.pairwise(statuses))


def test_a_terminal_shows_the_chains_then_the_descent():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    context = lenet_context()
    dp = named_strategy("dp", context.graph, context.machine)
    dp_s = full_simulate(TaskGraph(context, dp)).iteration_s
    result = search_with_progress(console, True, context, dp_s, 30.0, seed=0, max_proposals=300)
    text = out.getvalue()
    assert "MCMC search" in text and "final descent, wide sweep:" in text
    assert f"of {len(context.graph.ops)} ops unchanged in a row" in text
    assert result.locally_optimal


def test_check_local_shows_progress_on_a_terminal(tmp_path):
    class Args:
        model, machine, strategy, space, json = "lenet", "p100:1", "dp", "soap", False
        profile, fused_launches, batch_size, workers = None, False, None, 2

    out = io.StringIO()
    assert cmd_check_local(Args(), Console(file=out, force_terminal=True, width=120)) == 0
    text = out.getvalue()
    assert "check-local: ops" in text and "dp:" in text


def test_a_long_scan_reports_while_it_runs(monkeypatch):
    """A 64-GPU op's scan takes a minute: progress comes during it, not only after it."""
    monkeypatch.setattr(flexflow.search.scan, "PROGRESS_S", 0.001)  # a pool's waits
    monkeypatch.setattr(flexflow.search.scan, "PROGRESS_EVERY", 4)  # a serial scan's simulations
    context = SimContext(load_model("alexnet").graph(), parse_machine("p100:4"))
    graph, machine = context.graph, context.machine
    space = make_space("soap", graph, machine)
    for workers in (1, 2):
        statuses: list[DescentStatus] = []
        descend(
            context,
            named_strategy("dp", graph, machine),
            space,
            budget_s=1.5,
            on_status=statuses.append,
            workers=workers,
        )
        during = [s for s in statuses if s.wide and s.unchanged == 0 and s.improvements == 0]
        assert during, f"no report during the first op's scan with {workers} worker(s)"
        assert [s.neighbours for s in statuses] == sorted(s.neighbours for s in statuses)
