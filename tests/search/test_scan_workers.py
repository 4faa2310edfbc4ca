"""Scanning neighbours in worker processes gives the serial answers (flexflow.search.scan)."""

from __future__ import annotations

import pytest

from flexflow import FFConfig
from flexflow.machine import parse_machine
from flexflow.search.local import descend, improving_neighbours
from flexflow.search.scan import PoolScanner, SerialScanner, make_scanner
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def context_of(model: str, machine: str = "p100:1", **options) -> SimContext:
    graph = load_model(model, FFConfig(batch_size=8), **options).graph()
    return SimContext(graph, parse_machine(machine))


CASES = [
    ("lenet", "random", {}),
    ("lenet", "model", {}),
    ("rnnlm", "random", {"seq_length": 3, "vocab_size": 64, "embed_size": 16, "hidden_size": 16}),
]


@pytest.mark.parametrize("model, start, options", CASES)
def test_a_descent_with_workers_is_the_serial_descent(model, start, options):
    context = context_of(model, **options)
    graph, machine = context.graph, context.machine
    strategy = named_strategy(start, graph, machine, 1)
    space = make_space("soap", graph, machine)
    serial = descend(context, strategy, space)
    for workers in (2, 3):
        pooled = descend(context_of(model, **options), strategy, space, workers=workers)
        assert pooled.finished and pooled.strategy == serial.strategy
    assert serial.finished


@pytest.mark.parametrize("model, start, options", CASES)
def test_check_local_with_workers_lists_the_same_neighbours(model, start, options):
    context = context_of(model, **options)
    strategy = named_strategy(start, context.graph, context.machine, 2)
    space = make_space("soap", context.graph, context.machine)
    serial = improving_neighbours(context, strategy, space)
    done: list[int] = []
    pooled = improving_neighbours(context, strategy, space, done.append, workers=2)
    assert pooled == serial
    assert done[-1] == len(strategy) and done == sorted(done)


def scan_all(scanner, ops):
    """Every op of `ops` scanned, one per free worker; the scans by op."""
    scans, waiting = {}, list(ops)
    while waiting or scanner.busy:
        while scanner.idle and waiting:
            scanner.start(waiting.pop(0))
        scan = scanner.result()
        scans[scan.op] = scan
    return scans


def test_workers_apply_changes_and_agree_with_full_simulation():
    context = context_of("lenet")
    dp = named_strategy("dp", context.graph, context.machine)
    space = make_space("soap", context.graph, context.machine)
    config = space(1)[2]
    with make_scanner(context, dp, space, workers=2) as pool:
        assert isinstance(pool, PoolScanner) and pool.width == 2
        cost = pool.apply(1, config)
        assert cost == full_simulate(TaskGraph(context, dp.replace(1, config))).iteration_s
        pooled = scan_all(pool, [0, 2, 3, 4, 5])
        # scans under way are stopped and dropped; the workers then take new ones
        pool.start(0)
        pool.start(2)
        pool.cancel()
        assert pool.idle == 2 and scan_all(pool, [3])[3] == pooled[3]
        with pytest.raises(AssertionError, match="cancel"):
            pool.start(4)
            pool.apply(0, config)
    with SerialScanner(context, dp.replace(1, config), space) as serial:
        assert scan_all(serial, [0, 2, 3, 4, 5]) == pooled
    with pytest.raises(ValueError, match="workers must be >= 1"):
        make_scanner(context, dp, space, workers=0)


def test_a_scan_of_given_configurations_tries_only_those():
    context = context_of("lenet", "p100:4")
    strategy = named_strategy("random", context.graph, context.machine, 5)
    space = make_space("soap", context.graph, context.machine)
    op = 2
    with SerialScanner(context, strategy, space) as serial:
        serial.start(op)
        whole = dict(serial.result().faster)
    slower = [c for c in space(op) if c not in whole and c != strategy[op]]
    assert len(whole) >= 2 and slower
    chosen = (slower[0], *list(whole)[-2:])
    for workers in (1, 2):
        with make_scanner(context, strategy, space, workers) as scanner:
            scanner.start(op, chosen)
            scan = scanner.result()
        # exactly the chosen faster ones, each at the cost the whole scan found for it
        assert dict(scan.faster) == {c: whole[c] for c in chosen[1:]}
        assert scan.best == min(chosen[1:], key=whole.__getitem__)


def test_a_failing_worker_is_reported():
    context = context_of("lenet")
    dp = named_strategy("dp", context.graph, context.machine)

    def broken_space(op):
        raise KeyError(f"no space for op {op}")

    with PoolScanner(context, dp, broken_space, 2) as pool:
        pool.start(1)
        with pytest.raises(RuntimeError, match="(?s)a scan worker failed.*no space for op 1"):
            pool.result()


def test_a_bounded_descent_with_workers_stops_no_worse():
    context = context_of("rnnlm", "p100:4", seq_length=3, vocab_size=64, embed_size=16)
    space = make_space("soap", context.graph, context.machine)
    start = named_strategy("random", context.graph, context.machine, 4)
    descent = descend(context, start, space, budget_s=0.05, workers=2)
    assert not descent.finished
    after = full_simulate(TaskGraph(context, descent.strategy)).iteration_s
    assert after <= full_simulate(TaskGraph(context, start)).iteration_s
    with pytest.raises(ValueError, match="reads time.perf_counter"):
        descend(context, start, space, budget_s=1, clock=lambda: 0.0, workers=2)


def test_the_commands_answer_the_same_with_workers(capsys):
    import json

    from flexflow.cli import main

    for command in (
        ["check-local", "lenet", "--machine", "p100:1", "--strategy", "random", "--json"],
        ["search", "lenet", "--machine", "p100:1", "--proposals", "60", "--json"],
    ):
        assert main(command) == 0
        serial = json.loads(capsys.readouterr().out)
        assert main([*command, "--workers", "2"]) == 0
        pooled = json.loads(capsys.readouterr().out)
        for key in ("improving_neighbours", "best_iteration_ms", "locally_optimal"):
            assert pooled.get(key) == serial.get(key)


def test_workers_take_a_count_up_to_the_cores_or_auto(monkeypatch):
    import argparse

    from flexflow.cli_args import workers_arg
    from flexflow.search.processes import auto_workers

    monkeypatch.setattr("flexflow.search.processes.usable_cores", lambda: 4)
    assert workers_arg("3") == 3
    assert workers_arg("auto") == auto_workers()
    for bad in ("0", "-2", "many"):
        with pytest.raises(argparse.ArgumentTypeError, match="positive integer or 'auto'"):
            workers_arg(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="5 worker processes would share"):
        workers_arg("5")  # each simulates flat out: more than the cores only share them


def test_a_scanner_has_no_more_workers_than_the_graph_has_ops():
    graph, machine = load_model("lenet").graph(), parse_machine("p100:1")
    context = SimContext(graph, machine)
    dp = named_strategy("dp", graph, machine)
    with make_scanner(context, dp, make_space("soap", graph, machine), workers=50) as scanner:
        assert scanner.width == len(graph.ops) == 8


def test_auto_workers_are_one_per_core_as_memory_allows():
    from flexflow.search.processes import WORKER_MEMORY_BYTES, auto_workers, usable_cores

    assert auto_workers(cores=2, available=100 * WORKER_MEMORY_BYTES) == 2
    assert auto_workers(cores=8, available=3 * WORKER_MEMORY_BYTES - 1) == 2
    assert auto_workers(cores=8, available=WORKER_MEMORY_BYTES // 2) == 1
    assert auto_workers(cores=3, available=None) == 3
    assert 1 <= auto_workers() <= usable_cores()


def test_search_and_check_local_default_to_auto_workers(capsys, monkeypatch):
    import json

    import flexflow.search.processes as processes
    from flexflow.cli import main

    monkeypatch.setattr(processes, "auto_workers", lambda: 2)  # what `auto` resolves to
    for command in (
        ["check-local", "lenet", "--machine", "p100:1", "--strategy", "dp", "--json"],
        ["search", "lenet", "--machine", "p100:1", "--proposals", "20", "--json"],
    ):
        assert main(command) == 0
        assert json.loads(capsys.readouterr().out)["workers"] == 2


def test_container_limits_cap_the_cores_and_memory(tmp_path):
    """A container's `--cpus` and `--memory` (cgroup v2 and v1 files) cap what `auto` uses."""
    from flexflow.search.processes import available_memory_bytes, usable_cores

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 33554432 kB\nMemAvailable: 16777216 kB\n")  # 16 GiB
    v2, v1, none = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    for folder in (v2, v1 / "cpu", v1 / "memory", none):
        folder.mkdir(parents=True)
    (v2 / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs
    (v2 / "memory.max").write_text(str(6 << 30))
    (v2 / "memory.current").write_text(str(1 << 30))
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "memory" / "memory.limit_in_bytes").write_text(str(3 << 30))
    (v1 / "memory" / "memory.usage_in_bytes").write_text(str(2 << 30))
    cores = usable_cores(none)
    assert usable_cores(v2) == min(cores, 2) and usable_cores(v1) == 1
    assert available_memory_bytes(meminfo, none) == 16 << 30
    assert available_memory_bytes(meminfo, v2) == 5 << 30
    assert available_memory_bytes(meminfo, v1) == 1 << 30
    (v2 / "cpu.max").write_text("max 100000\n")  # no limits: as without a cgroup
    (v2 / "memory.max").write_text("max\n")
    assert usable_cores(v2) == cores and available_memory_bytes(meminfo, v2) == 16 << 30
    assert available_memory_bytes(tmp_path / "missing", none) is None
