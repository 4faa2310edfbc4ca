"""Strategies whose whole step runs as one C call per CPU (every op split the same way by sample
alone) are priced by the profile's times inside that call (`Profile.native_times`), and delta
simulation still equals full simulation across the changes that enter or leave such a split."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexflow.cost import DEVICE_CONSTANTS, CostModel, Profile, TaskTime, cost_key
from flexflow.machine_presets import LegateRanks, local_machine
from flexflow.ops.base import region_shape
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph, full_simulate
from flexflow.simulator.native_loop import resource_load
from flexflow.step_profiler import sample_degrees
from flexflow.strategies import data_parallel_over, named_strategy
from flexflow.strategy import ParallelConfig, Strategy

from .test_delta import GRAPH_SEEDS, PICK, picked_changes, random_graph, timeline

CPUS = local_machine("--cpus 2 --gpus 0", memory_bytes=1 << 34, ranks=LegateRanks(1, 1))


def native_profile(graph, machine, scale: float = 0.5, skip: int | None = None) -> Profile:
    """Every op's C step time at every sample degree: `scale` x its analytic kernel time (less
    the launch), as if measured (op `skip`'s left out)."""
    cost, model = CostModel(), machine.devices[0].model
    launch = DEVICE_CONSTANTS["cpu"].launch_overhead_s
    native = {}
    for degree in sample_degrees(graph, machine.num_devices):
        for node, config in zip(graph.ops, data_parallel_over(graph, degree).configs, strict=True):
            if node.id == skip:
                continue
            region = config.task_regions(node.sig.output_shape)[0]
            time = cost.task_time(node, region, machine.devices[0])
            key = cost_key(node, region_shape(region), model, graph.computes_input_grads(node.id))
            forward, backward = time.forward_s - launch, time.backward_s - launch
            native[key] = TaskTime(scale * forward, scale * backward + 1e-6)
    return Profile(native_times=native)


def cpu_context(graph, profile: Profile, sparse_labels: bool = True, machine=CPUS) -> SimContext:
    return SimContext(
        graph, machine, CostModel(profile), fused_launches=True, sparse_labels=sparse_labels
    )


def op_exe(tg: TaskGraph, op: int) -> list[float]:
    return [tg.exe[t] for pair in zip(tg.fwd[op], tg.bwd[op], strict=True) for t in pair]


def test_a_sample_split_of_every_op_is_timed_as_its_c_step():
    graph = random_graph(3)
    profile = native_profile(graph, CPUS)
    context = cpu_context(graph, profile)
    dp = named_strategy("dp", graph, CPUS)
    tg = TaskGraph(context, dp)
    assert tg.native
    for node, config in zip(graph.ops, dp.configs, strict=True):
        region = context.regions(node.id, config.degrees)[0]
        grads = graph.computes_input_grads(node.id)
        time = profile.native_times[
            cost_key(node, region_shape(region), CPUS.devices[0].model, grads)
        ]
        assert op_exe(tg, node.id) == [time.forward_s, time.backward_s] * len(config.devices)
    one = Strategy(dp.ops, tuple(ParallelConfig.single(len(c.degrees), 1) for c in dp.configs))
    assert TaskGraph(context, one).native  # everything on one CPU: a split of degree 1
    changed = TaskGraph(context, dp.replace(0, one.configs[0]))
    assert not changed.native  # one op elsewhere: every op runs op by op
    plain = TaskGraph(cpu_context(graph, Profile()), dp.replace(0, one.configs[0]))
    assert [op_exe(changed, op) for op in range(len(graph.ops))] == [
        op_exe(plain, op) for op in range(len(graph.ops))
    ]
    op_by_op = TaskGraph(cpu_context(graph, Profile()), dp)
    assert full_simulate(tg).iteration_s < full_simulate(op_by_op).iteration_s


@pytest.mark.parametrize(
    "why",
    ["an op not measured", "another loss", "not a run on CPUs", "devices out of order", "ranks"],
)
def test_no_c_step_times_where_the_step_is_not_one_measured_c_call(why):
    graph = random_graph(3)
    profile = native_profile(graph, CPUS, skip=1 if why == "an op not measured" else None)
    context = cpu_context(graph, profile, sparse_labels=why != "another loss")
    if why == "not a run on CPUs":
        context = SimContext(graph, CPUS, CostModel(profile), fused_launches=True,
                             serial_launches=False, sparse_labels=True)  # fmt: skip
    if why == "ranks":  # two processes of one CPU each: a split over both spans the nodes
        two = local_machine("--cpus 1 --gpus 0", memory_bytes=1 << 34, ranks=LegateRanks(2, 2))
        context = cpu_context(graph, native_profile(graph, two), machine=two)
    dp = named_strategy("dp", graph, context.machine)
    if why == "devices out of order":  # on the CPUs the other way round
        dp = Strategy(dp.ops, tuple(ParallelConfig(c.degrees, c.devices[::-1]) for c in dp.configs))
    assert not TaskGraph(context, dp).native


MOVES = st.lists(
    st.tuples(
        st.lists(st.tuples(PICK, PICK), min_size=1, max_size=3),
        st.sampled_from(("picked", "split", "all but one to a split", "one to a split")),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)
"""Changes, each kept or taken back (the flag): several ops' (picked), or every op to a whole-
model sample split, or all but one op, or one op (the first pick's)."""


def _moves(moves, graph, machine):
    for picks, kind, undo in moves:
        if kind == "picked":
            yield picked_changes(picks, graph, machine), undo
            continue
        degrees = sample_degrees(graph, machine.num_devices)
        split = data_parallel_over(graph, degrees[picks[0][1] % len(degrees)])
        op = picks[0][0] % len(graph.ops)
        changes = list(enumerate(split.configs))
        if kind == "all but one to a split":
            changes = changes[:op] + changes[op + 1 :]
        elif kind == "one to a split":
            changes = [changes[op]]
        yield changes or [(op, split.configs[op])], undo


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_seed=GRAPH_SEEDS, start=st.sampled_from(("dp", "random")), moves=MOVES)
def test_delta_equals_full_entering_and_leaving_a_c_step(graph_seed, start, moves):
    """Kept and undone changes into and out of a whole-model sample split: the delta's
    timeline is the full simulation's of the changed strategy, task for task, the load bound
    stays below the changed graph's load, and a cutoff stops only a slower strategy."""
    graph = random_graph(graph_seed)
    context = cpu_context(graph, native_profile(graph, CPUS))
    strategy = named_strategy(start, graph, CPUS, seed=graph_seed)
    delta = DeltaSimulator(TaskGraph(context, strategy))
    for changes, undo in _moves(moves, graph, CPUS):
        bound = delta.tg.load_bound(changes)
        before, cost = timeline(delta.tg, delta.schedule), delta.iteration_s
        changed = strategy
        for op, config in changes:
            changed = changed.replace(op, config)
        fresh = TaskGraph(context, changed)
        full = full_simulate(fresh)
        delta.change_many(changes, cutoff=cost)
        if delta.iteration_s == math.inf:
            assert full.iteration_s > cost * (1 - 1e-12)
            delta.undo()
            assert timeline(delta.tg, delta.schedule) == before
            continue
        assert delta.tg.native == fresh.native
        assert delta.iteration_s == full.iteration_s
        assert timeline(delta.tg, delta.schedule) == timeline(fresh, full)
        assert bound <= max(resource_load(fresh)) * (1 + 1e-12)
        if undo:
            delta.undo()
            assert timeline(delta.tg, delta.schedule) == before
        else:
            strategy = changed


def test_the_op_blocks_equal_the_reference_in_and_out_of_a_c_step():
    """native/blocks.c builds a C step's op blocks as flexflow.simulator.reference says."""
    from flexflow.simulator.reference import reference_op_block

    from .test_native import built_blocks

    graph = random_graph(5)
    context = cpu_context(graph, native_profile(graph, CPUS))
    dp = named_strategy("dp", graph, CPUS)
    tg = TaskGraph(context, dp)
    one = ParallelConfig.single(len(dp.configs[1].degrees), 0)
    for change in (None, (1, one), (1, dp.configs[1])):  # in, out, in again
        if change is not None:
            tg.set_config(*change)
        assert tg.native == (change is None or change[1] == dp.configs[1])
        for (_, op), block in built_blocks(tg, "op").items():
            assert block == reference_op_block(tg, op)


def test_a_change_whose_cores_work_passes_its_cutoff_is_not_simulated(monkeypatch):
    """Under the runtime's per-task cost the cores' whole work bounds the iteration, and the
    timeline's bounds never see it: leaving the C step for op-by-op tasks adds work past the
    cutoff, so the change stops before any simulation, the full simulation agrees it is
    slower, and undo leaves the timeline as it was; a change under its cutoff is simulated."""
    import flexflow.simulator.schedule as schedule

    graph = random_graph(3)
    context = cpu_context(graph, native_profile(graph, CPUS))
    dp = named_strategy("dp", graph, CPUS)
    delta = DeltaSimulator(TaskGraph(context, dp))
    before, cost = timeline(delta.tg, delta.schedule), delta.iteration_s
    one = ParallelConfig.single(len(dp.configs[0].degrees), 0)
    slower = full_simulate(TaskGraph(context, dp.replace(0, one)))
    calls = []
    monkeypatch.setattr(schedule, "simulate", lambda *a, **k: calls.append(a) or 0)
    delta.change_many([(0, one)], cutoff=cost)
    assert delta.tg.cores_bound_s() > cost and slower.iteration_s > cost
    assert (delta.iteration_s, delta.replayed, calls) == (math.inf, 0, [])
    delta.undo()
    assert timeline(delta.tg, delta.schedule) == before and delta.iteration_s == cost
    assert delta.tg.work_s() == TaskGraph(context, dp).work_s()  # not the changed graph's
    monkeypatch.undo()
    delta.change_many([(0, one)], cutoff=2 * slower.iteration_s)  # simulated, and exact
    assert delta.iteration_s == slower.iteration_s
