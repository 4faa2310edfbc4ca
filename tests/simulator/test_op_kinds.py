"""Ops of one kind (the same operator on the same shapes) share the simulation context's
memoized geometry, templates and task times: the task graphs and timelines must be exactly
those of a context where every op is its own kind."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flexflow.simulator.context as context_module
from flexflow import ActiMode, DataType, FFConfig, FFModel
from flexflow.machine import parse_machine
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph
from flexflow.simulator.context import op_kinds
from flexflow.space import enumerate_configs
from flexflow.strategies import named_strategy


def repeated_graph(seed: int):
    """Repeated identical layers: a residual stack of equal conv blocks, or an unrolled LSTM
    (steps of a layer, and two layers of one width), each with a distinct head."""
    rng = np.random.default_rng(seed)
    model = FFModel(FFConfig(batch_size=8))
    if rng.random() < 0.5:
        tokens = model.create_tensor((8, int(rng.integers(2, 5))), DataType.DT_INT32)
        seq = model.embedding(tokens, 20, 8)
        for _ in range(int(rng.integers(1, 3))):
            seq = model.lstm(seq, 8)
        t = model.dense(model.lstm(seq, 8, return_sequences=False), 4)
    else:
        t = model.conv2d(model.create_tensor((8, 3, 8, 8)), 4, 3, 3, 1, 1, 1, 1)
        for _ in range(int(rng.integers(2, 4))):
            b = model.conv2d(t, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
            if rng.random() < 0.5:
                b = model.batch_norm(b)
            t = model.add(t, b)
        t = model.dense(model.flat(model.pool2d(t, 2, 2, 2, 2, 0, 0)), 4)
    model.softmax(t)
    return model.graph()


def test_repeated_layers_share_kinds_and_others_do_not():
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16))
    a = model.dense(x, 16)  # reads only the model input: no input gradient, a kind of its own
    b = model.dense(a, 16)
    c = model.dense(b, 16)  # the same operator on the same shapes as `b`
    d = model.dense(c, 8)  # another width
    model.softmax(d)
    kinds = op_kinds(model.graph())
    assert kinds[1] == kinds[2] and len(set(kinds)) == 4

    graph = repeated_graph(1)  # an unrolled LSTM: its steps after the first share a kind
    assert len(set(op_kinds(graph))) < len(graph.ops)


def timeline(tg: TaskGraph, schedule) -> dict:
    return {
        tg.order[t]: (tg.exe[t], tg.size_bytes[t], schedule.ready[t], schedule.end[t])
        for t in tg.live_tasks()
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_seed=st.integers(0, 10_000),
    machine=st.sampled_from(("p100:1", "k80:2", "p100:2")),
    start=st.sampled_from(("dp", "random")),
    moves=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), max_size=8),
)
def test_shared_kinds_build_the_graphs_of_one_kind_per_op(graph_seed, machine, start, moves):
    graph, m = repeated_graph(graph_seed), parse_machine(machine)
    strategy = named_strategy(start, graph, m, graph_seed)
    shared = DeltaSimulator(TaskGraph(SimContext(graph, m), strategy))
    with mock.patch.object(context_module, "op_kinds", lambda g: tuple(range(len(g.ops)))):
        alone_context = SimContext(graph, m)
    assert len(set(alone_context.kinds)) == len(graph.ops)
    alone = DeltaSimulator(TaskGraph(alone_context, strategy))
    assert timeline(shared.tg, shared.schedule) == timeline(alone.tg, alone.schedule)
    for op_pick, config_pick in moves:
        op = op_pick % len(graph.ops)
        space = enumerate_configs(graph.ops[op].sig, m)
        config = space[config_pick % len(space)]
        # the op and every other op of its kind at once, as a layer move does
        kinds = shared.tg.context.kinds
        ops = [o for o in range(len(graph.ops)) if kinds[o] == kinds[op]]
        shared.change_many([(o, config) for o in ops])
        alone.change_many([(o, config) for o in ops])
        assert shared.iteration_s == alone.iteration_s
        assert timeline(shared.tg, shared.schedule) == timeline(alone.tg, alone.schedule)
