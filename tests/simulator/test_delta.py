"""Delta simulation gives exactly the timeline of a full simulation, for any sequence of changes
(one op at a time, or several at once as a layer move makes them)."""

from __future__ import annotations

import math
from array import array

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.cost import CostModel
from flexflow.machine import parse_machine
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph, full_simulate
from flexflow.simulator.native_loop import resource_load
from flexflow.space import enumerate_configs
from flexflow.strategies import named_strategy
from flexflow.strategy import ParallelConfig, Strategy

MACHINES = ("p100:1", "k80:1", "p100:2", "k80:2", "dgx-h100:1")
GRAPH_SEEDS = st.integers(0, 10_000)
PICK = st.integers(0, 10_000)
"""An op pick or a configuration pick, taken modulo the choices."""
SEVERAL_MOVES = st.lists(
    st.tuples(st.lists(st.tuples(PICK, PICK), min_size=1, max_size=6), st.booleans()),
    min_size=1,
    max_size=6,
)
"""Changes of several ops at once (`picked_changes` of each), each kept or taken back."""
SEVERAL_OP_CHANGES = dict(
    graph_seed=GRAPH_SEEDS,
    machine=st.sampled_from(MACHINES),
    start=st.sampled_from(("dp", "expert", "random")),
    moves=SEVERAL_MOVES,
    fused=st.booleans(),
)
"""A graph, machine and start strategy, then several-op changes each kept or taken back."""


def picked_changes(picks, graph, machine) -> list[tuple[int, ParallelConfig]]:
    """(op pick, configuration pick)s as changes, each pick taken modulo the choices."""
    changes = []
    for op_pick, config_pick in picks:
        op = op_pick % len(graph.ops)
        space = enumerate_configs(graph.ops[op].sig, machine)
        changes.append((op, space[config_pick % len(space)]))
    return changes


def random_graph(seed: int):
    """A small branching graph: convolutions, pooling, concat, batch norm, dense layers, an LSTM."""
    rng = np.random.default_rng(seed)
    model = FFModel(FFConfig(batch_size=8))
    if rng.random() < 0.3:
        tokens = model.create_tensor((8, 3), __import__("flexflow").DataType.DT_INT32)
        seq = model.lstm(model.embedding(tokens, 20, 8), 8)
        t = model.dense(model.lstm(seq, 8, return_sequences=False), 4)
        model.softmax(t)
        return model.graph()
    x = model.create_tensor((8, 4, 8, 8))
    branches = []
    for _ in range(int(rng.integers(1, 4))):
        b = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
        if rng.random() < 0.5:
            b = model.batch_norm(b)
        branches.append(b)
    t = branches[0] if len(branches) == 1 else model.concat(branches, axis=1)
    t = model.pool2d(t, 2, 2, 2, 2, 0, 0)
    t = model.flat(t)
    for _ in range(int(rng.integers(1, 3))):
        t = model.dense(t, 8, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(t, 4))
    return model.graph()


def delta_of(graph_seed: int, machine: str, start: str, fused: bool):
    """A random graph's context, its `start` strategy and a delta simulator of it."""
    graph, m = random_graph(graph_seed), parse_machine(machine)
    context = SimContext(graph, m, CostModel(), fused_launches=fused)
    strategy = named_strategy(start, graph, m, seed=graph_seed)
    return context, strategy, DeltaSimulator(TaskGraph(context, strategy))


def timeline(tg: TaskGraph, schedule) -> dict:
    return {
        tg.order[t]: (schedule.ready[t], schedule.start[t], schedule.end[t])
        for t in tg.live_tasks()
    }


def assert_delta_equals_full(graph_seed, machine, start, moves, fused_launches: bool) -> None:
    """After each move (op pick, configuration pick), delta simulation's schedule is the full
    simulation's of the changed strategy, task for task."""
    graph = random_graph(graph_seed)
    m = parse_machine(machine) if isinstance(machine, str) else machine
    context = SimContext(graph, m, CostModel(), fused_launches=fused_launches)
    strategy = named_strategy(start, graph, m, seed=graph_seed)
    delta = DeltaSimulator(TaskGraph(context, strategy))
    for op_pick, config_pick, *undo in moves:
        op = op_pick % len(graph.ops)
        space = enumerate_configs(graph.ops[op].sig, m)
        config = space[config_pick % len(space)]
        delta.change(op, config)
        if undo and undo[0]:  # taken back (a rejected proposal): as before the change
            delta.undo()
        else:
            strategy = strategy.replace(op, config)
        fresh = TaskGraph(context, strategy)
        full = full_simulate(fresh)
        assert delta.iteration_s == full.iteration_s
        assert delta.tg.runtime_s == fresh.runtime_s
        assert timeline(delta.tg, delta.schedule) == timeline(fresh, full)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_seed=GRAPH_SEEDS,
    machine=st.sampled_from(MACHINES),
    start=st.sampled_from(("dp", "expert", "model", "random")),
    moves=st.lists(st.tuples(PICK, PICK), min_size=1, max_size=12),
)
def test_delta_equals_full_after_every_change(graph_seed, machine, start, moves):
    assert_delta_equals_full(graph_seed, machine, start, moves, fused_launches=False)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_seed=GRAPH_SEEDS,
    machine=st.sampled_from(MACHINES),
    start=st.sampled_from(("dp", "expert", "model", "random")),
    moves=st.lists(st.tuples(PICK, PICK, st.booleans()), min_size=1, max_size=12),
    fused=st.booleans(),
)
def test_an_undone_change_leaves_the_graph_and_schedule_as_before(
    graph_seed, machine, start, moves, fused
):
    """Changes kept or taken back in any order: the schedule is always the full simulation's
    of the strategy that stands (an undo restores the task graph, then the times)."""
    assert_delta_equals_full(graph_seed, machine, start, moves, fused_launches=fused)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SEVERAL_OP_CHANGES)
def test_a_change_of_several_ops_at_once_equals_full(graph_seed, machine, start, moves, fused):
    """`change_many` (a layer move's delta: several ops, one op possibly twice) gives the full
    simulation's timeline of the changed strategy, and its undo restores the one before."""
    context, strategy, delta = delta_of(graph_seed, machine, start, fused)
    graph, m = context.graph, context.machine
    for picks, undo in moves:
        changes = picked_changes(picks, graph, m)
        delta.change_many(changes)
        if undo:
            delta.undo()
        else:
            for op, config in changes:
                strategy = strategy.replace(op, config)
        fresh = TaskGraph(context, strategy)
        full = full_simulate(fresh)
        assert delta.iteration_s == full.iteration_s
        assert timeline(delta.tg, delta.schedule) == timeline(fresh, full)
        assert delta.tg.configs == list(strategy.configs)


def test_delta_on_a_zoo_model_matches_full():
    from flexflow.zoo import load_model

    graph, m, cost = (
        load_model("inception_v3", image_size=139).graph(),
        parse_machine("p100:1"),
        CostModel(),
    )
    strategy = named_strategy("dp", graph, m)
    delta = DeltaSimulator(TaskGraph(SimContext(graph, m, cost), strategy))
    rng = np.random.default_rng(0)
    for _ in range(15):
        op = int(rng.integers(len(graph.ops)))
        space = enumerate_configs(graph.ops[op].sig, m)
        config = space[int(rng.integers(len(space)))]
        strategy = strategy.replace(op, config)
        delta.change(op, config)
    assert (
        delta.iteration_s
        == full_simulate(TaskGraph(SimContext(graph, m, cost), strategy)).iteration_s
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_seed=GRAPH_SEEDS,
    machine=st.sampled_from(MACHINES),
    start=st.sampled_from(("dp", "expert", "random")),
    moves=st.lists(st.tuples(PICK, PICK), min_size=1, max_size=8),
)
def test_delta_equals_full_with_fused_launches(graph_seed, machine, start, moves):
    """A change also re-times the op after the changed one (it may stop or start fusing)."""
    assert_delta_equals_full(graph_seed, machine, start, moves, fused_launches=True)


def test_fused_launches_charge_an_op_in_its_predecessors_task_no_launch():
    from flexflow.cost import DEVICE_CONSTANTS
    from flexflow.strategy import ParallelConfig
    from flexflow.zoo import load_model

    graph, m = load_model("lenet", FFConfig(batch_size=8)).graph(), parse_machine("p100:1")
    launch = DEVICE_CONSTANTS["gpu"].launch_overhead_s
    dp = named_strategy("dp", graph, m)
    moved = dp.replace("fc1", ParallelConfig((4, 1), (1, 0, 2, 3)))  # other devices: no fusion

    def exe(strategy, fused):
        tg = TaskGraph(SimContext(graph, m, CostModel(), fused_launches=fused), strategy)
        return [tg.exe[tg.fwd[op][0]] for op in range(len(graph.ops))]

    for strategy, unfused_ops in ((dp, {0}), (moved, {0, 5, 6})):
        plain, fused = exe(strategy, False), exe(strategy, True)
        for op, (a, b) in enumerate(zip(plain, fused, strict=True)):
            want = a if op in unfused_ops else max(0.0, a - launch)
            assert b == pytest.approx(want, abs=1e-15), (graph.ops[op].name, a, b)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_seed=GRAPH_SEEDS,
    machine=st.sampled_from(MACHINES),
    start=st.sampled_from(("dp", "expert", "random")),
    moves=st.lists(st.tuples(PICK, PICK, st.floats(0.5, 1.5)), min_size=1, max_size=10),
    fused=st.booleans(),
)
def test_a_change_cut_off_is_one_slower_than_its_cutoff(graph_seed, machine, start, moves, fused):
    """With a cutoff, a delta either gives the full simulation's timeline exactly or stops
    with inf, and then the changed strategy's full simulation is slower than the cutoff (a
    bound is never above the iteration it bounds); its undo restores the timeline before.
    Cutoffs around the current cost, where the bounds decide."""
    context, strategy, delta = delta_of(graph_seed, machine, start, fused)
    graph, m = context.graph, context.machine
    for op_pick, config_pick, scale in moves:
        op = op_pick % len(graph.ops)
        space = enumerate_configs(graph.ops[op].sig, m)
        config = space[config_pick % len(space)]
        cutoff = delta.iteration_s * scale
        before = timeline(delta.tg, delta.schedule)
        delta.change(op, config, cutoff)
        changed = strategy.replace(op, config)
        full = full_simulate(TaskGraph(context, changed))
        if delta.iteration_s == math.inf:
            assert full.iteration_s > cutoff * (1 - 1e-12)
            delta.undo()
            assert timeline(delta.tg, delta.schedule) == before
            continue
        assert delta.iteration_s == full.iteration_s
        assert timeline(delta.tg, delta.schedule) == timeline(TaskGraph(context, changed), full)
        strategy = changed


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**SEVERAL_OP_CHANGES)
def test_the_load_bound_is_below_the_changed_graphs_load(graph_seed, machine, start, moves, fused):
    """`TaskGraph.load_bound`, found without making the change, is at most the busiest
    device's or link's load in the changed graph (so at most its makespan), through kept and
    undone changes; `resource_load` is each resource's summed exe_time."""
    context, strategy, delta = delta_of(graph_seed, machine, start, fused)
    graph, m = context.graph, context.machine
    for picks, undo in moves:
        changes = picked_changes(picks, graph, m)
        bound = delta.tg.load_bound(changes)
        delta.change_many(changes)
        fresh = TaskGraph(context, Strategy(strategy.ops, tuple(delta.tg.configs)))
        load = resource_load(fresh)
        expected = [0.0] * fresh.num_resources
        for t in fresh.live_tasks():
            for r in fresh.resource_sets.sets[fresh.res_set[t]]:
                expected[r] += fresh.exe[t]
        assert list(load) == pytest.approx(expected, rel=1e-12)
        assert bound <= max(load) * (1 + 1e-12)
        assert max(load) <= max(full_simulate(fresh).end) * (1 + 1e-12)
        if undo:
            delta.undo()


def test_a_change_cut_off_must_be_undone_before_the_next():
    graph, m = random_graph(3), parse_machine("p100:1")
    delta = DeltaSimulator(TaskGraph(SimContext(graph, m), named_strategy("dp", graph, m)))
    op = len(graph.ops) - 2
    one_device = next(c for c in enumerate_configs(graph.ops[op].sig, m) if len(c.devices) == 1)
    delta.change(op, one_device, cutoff=delta.iteration_s * 1e-6)  # nothing is that fast
    assert delta.iteration_s == math.inf
    with pytest.raises(AssertionError, match="undone first"):
        delta.change(op, one_device)
    delta.undo()
    delta.change(op, one_device)
    assert delta.iteration_s < math.inf


@pytest.mark.parametrize("cutoff_at", [0.0, 0.5, 0.999])
def test_a_change_stopped_at_its_cutoff_leaves_the_schedule_untouched(cutoff_at: float):
    """A delta journals its new times and writes them only when its replay ends, so a change
    stopped at its cutoff (at once, half way or near the end) leaves every time as it was and
    logs nothing; its undo keeps them, and a change that ends logs its removed and added
    tasks and every task it simulated, which its undo restores."""
    from flexflow.zoo import load_model

    graph, m = load_model("alexnet").graph(), parse_machine("p100:1")
    context = SimContext(graph, m)
    delta = DeltaSimulator(TaskGraph(context, named_strategy("dp", graph, m)))
    before = timeline(delta.tg, delta.schedule)
    arrays = [
        array("d", a) for a in (delta.schedule.ready, delta.schedule.start, delta.schedule.end)
    ]
    op = 3
    config = enumerate_configs(graph.ops[op].sig, m)[-1]
    delta.change(op, config)
    ended_s = delta.iteration_s
    delta.undo()
    delta.change(op, config, cutoff=max(cutoff_at * ended_s, 1e-12))
    assert delta.iteration_s == math.inf
    assert delta._log.size == 0
    now = (delta.schedule.ready, delta.schedule.start, delta.schedule.end)
    assert all(
        a[: len(old)] == old and not any(a[len(old) :]) for a, old in zip(now, arrays, strict=True)
    )
    delta.undo()
    assert timeline(delta.tg, delta.schedule) == before
    delta.change(op, config)  # not cut: its removed and added tasks, then every task simulated
    change_sizes = len(delta.tg._undo.removed) + len(delta.tg._undo.added)
    assert delta._log.size == change_sizes + delta.replayed
    delta.undo()
    assert timeline(delta.tg, delta.schedule) == before


def test_the_edge_index_follows_compactions_and_undos():
    """The C edge index (`TaskGraph.edge_index`) is kept through removals, undos and the
    compactions of the edge arrays: after each, a delta still equals a full simulation."""
    graph, m = random_graph(11), parse_machine("p100:2")
    context = SimContext(graph, m)
    strategy = named_strategy("random", graph, m, seed=1)
    delta = DeltaSimulator(TaskGraph(context, strategy))
    rng = np.random.default_rng(1)
    compactions = 0
    for step in range(60):
        op = int(rng.integers(len(graph.ops)))
        space = enumerate_configs(graph.ops[op].sig, m)
        config = space[int(rng.integers(len(space)))]
        edges_before = len(delta.tg.edge_src)
        delta.change(op, config)
        compactions += len(delta.tg.edge_src) < edges_before
        if step % 3 == 2:
            delta.undo()
        else:
            strategy = strategy.replace(op, config)
        fresh = TaskGraph(context, strategy)
        assert timeline(delta.tg, delta.schedule) == timeline(fresh, full_simulate(fresh))
    assert compactions > 0  # the walk did compact the arrays


def test_a_task_graph_changed_behind_its_edge_index_is_an_error():
    graph, m = random_graph(3), parse_machine("p100:1")
    tg = TaskGraph(SimContext(graph, m), named_strategy("dp", graph, m))
    tg.edge_src.append(0)
    tg.edge_dst.append(1)
    with pytest.raises(AssertionError, match="edge index"):
        full_simulate(tg)


@pytest.mark.parametrize("machine", ["p100:2", "k80:2"])
def test_a_scan_of_one_ops_configurations_equals_full_simulation(machine):
    """A scan tries an op's configurations one after another from one schedule, undoing each:
    every delta starts from the same schedule at the same t0, so the simulator reuses its
    choice of the tasks to simulate again (`ff_index_undone`). Each neighbour's cost, and
    whether its cutoff stopped it, must be the full simulation's; a kept change in between
    starts a new base."""
    graph, m = random_graph(5), parse_machine(machine)
    context = SimContext(graph, m)
    strategy = named_strategy("random", graph, m, seed=2)
    delta = DeltaSimulator(TaskGraph(context, strategy))
    for op in (len(graph.ops) // 2, 1, len(graph.ops) - 1):
        base = delta.iteration_s
        for config in enumerate_configs(graph.ops[op].sig, m):
            full = full_simulate(TaskGraph(context, strategy.replace(op, config))).iteration_s
            delta.change(op, config, cutoff=base)
            if delta.iteration_s == math.inf:
                assert full > base * (1 - 1e-12)  # a cut neighbour is slower than the cutoff
            else:
                assert delta.iteration_s == full
            delta.undo()
            assert delta.iteration_s == base
        best = min(
            enumerate_configs(graph.ops[op].sig, m),
            key=lambda c, op=op: (
                full_simulate(TaskGraph(context, strategy.replace(op, c))).iteration_s
            ),
        )
        delta.change(op, best)  # kept
        strategy = strategy.replace(op, best)
        fresh = TaskGraph(context, strategy)
        assert timeline(delta.tg, delta.schedule) == timeline(fresh, full_simulate(fresh))
