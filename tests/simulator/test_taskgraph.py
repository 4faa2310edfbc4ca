"""Hand-checked timelines of tiny task graphs: transfers, FIFO links, parameter synchronization, memory."""

from __future__ import annotations

import pytest

from flexflow import FFConfig, FFModel
from flexflow.cost import CostModel
from flexflow.machine import parse_machine
from flexflow.simulator import SimContext, TaskGraph, full_simulate, summarize
from flexflow.strategy import ParallelConfig, Strategy


def two_dense():
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16), name="x")
    model.dense(model.dense(x, 32, name="fc1"), 4, name="fc2")
    return model.graph()


def build(graph, machine, configs):
    strategy = Strategy(tuple(n.name for n in graph.ops), tuple(configs))
    cost = CostModel()
    tg = TaskGraph(SimContext(graph, machine, cost), strategy)
    return tg, full_simulate(tg), cost


def task(tg, name):
    (t,) = [t for t in tg.live_tasks() if tg.name[t] == name]
    return t


def test_model_parallel_pair_timeline_by_hand():
    graph, machine = two_dense(), parse_machine("p100:1")
    tg, s, cost = build(graph, machine, [ParallelConfig.single(2, 0), ParallelConfig.single(2, 1)])
    fc1, fc2 = graph.op("fc1"), graph.op("fc2")
    t1 = cost.task_time(fc1, ((0, 8), (0, 32)), machine.devices[0])
    t2 = cost.task_time(fc2, ((0, 8), (0, 4)), machine.devices[1])
    move = machine.transfer_s(0, 1, 8 * 32 * 4)  # fc1's whole output, gpu0 -> gpu1
    back = machine.transfer_s(1, 0, 8 * 32 * 4)  # its gradient, gpu1 -> gpu0
    f1, x, f2 = task(tg, "fc1[0].fwd"), task(tg, "fc1[0]->fc2[0]"), task(tg, "fc2[0].fwd")
    b2, y, b1 = task(tg, "fc2[0].bwd"), task(tg, "grad fc1[0]->fc2[0]"), task(tg, "fc1[0].bwd")
    assert (s.start[f1], s.end[f1]) == (0.0, t1.forward_s)
    assert (s.start[x], s.end[x]) == pytest.approx((t1.forward_s, t1.forward_s + move))
    assert s.start[f2] == pytest.approx(s.end[x])
    assert s.start[b2] == pytest.approx(s.end[f2]) and s.end[b2] == pytest.approx(
        s.start[b2] + t2.backward_s
    )
    assert s.start[y] == pytest.approx(s.end[b2]) and s.end[y] == pytest.approx(s.start[y] + back)
    assert s.start[b1] == pytest.approx(s.end[y])
    # each weight lives on one device: no all-reduce, one update after the last backward using it
    assert not [t for t in tg.live_tasks() if "all-reduce" in tg.name[t]]
    update = task(tg, "update fc1.kernel#0@0")
    assert s.start[update] == pytest.approx(s.end[b1])
    expected = s.end[b1] + cost.update_time(32 * 16, machine.devices[0])
    assert s.iteration_s == pytest.approx(max(expected, s.end[task(tg, "update fc1.bias#0@0")]))
    # forward and backward transfers use opposite directions of the same NVLink pair
    assert tg.res[x] != tg.res[y] and len(tg.res[x]) == len(tg.res[y]) == 1


def test_data_parallel_pays_a_ring_all_reduce():
    graph, machine = two_dense(), parse_machine("p100:1")
    dp = ParallelConfig((4, 1), (0, 1, 2, 3))
    tg, s, _ = build(graph, machine, [dp, dp])
    result = summarize(tg, s)
    weights_bytes = 4 * (32 * 16 + 32 + 4 * 32 + 4)
    # a ring of r = 4 moves 2(r-1)/r of each weight per hop, r hops: 2(r-1) x the weights
    assert result.comm_bytes_total == pytest.approx(2 * 3 * weights_bytes, rel=1e-6)
    ring = [t for t in tg.live_tasks() if tg.name[t].startswith("all-reduce fc1.kernel")]
    assert len(ring) == 4
    assert {tg.size_bytes[t] for t in ring} == {int(2 * 3 / 4 * 32 * 16 * 4)}
    updates = [t for t in tg.live_tasks() if tg.name[t].startswith("update fc1.kernel")]
    assert len(updates) == 4 and min(s.start[u] for u in updates) >= max(s.end[t] for t in ring)


def test_transfers_sharing_a_link_queue_fifo():
    """Two consumers on gpu1 read from gpu0: their transfers share the one NVLink gpu0->gpu1."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16), name="x")
    h = model.dense(x, 64, name="src")
    model.dense(h, 4, name="a")
    model.dense(h, 4, name="b")
    graph, machine = model.graph(), parse_machine("p100:1")
    tg, s, _ = build(
        graph,
        machine,
        [ParallelConfig.single(2, 0), ParallelConfig.single(2, 1), ParallelConfig.single(2, 1)],
    )
    xa, xb = task(tg, "src[0]->a[0]"), task(tg, "src[0]->b[0]")
    assert tg.res[xa] == tg.res[xb]
    assert s.ready[xa] == s.ready[xb]
    first, second = sorted((xa, xb), key=lambda t: s.start[t])
    assert s.start[second] == pytest.approx(s.end[first])  # queued behind the first


def test_memory_counts_weights_three_times_and_kept_activations():
    graph, machine = two_dense(), parse_machine("p100:1")
    tg, s, _ = build(graph, machine, [ParallelConfig.single(2, 0), ParallelConfig.single(2, 0)])
    weights = 32 * 16 + 32 + 4 * 32 + 4
    activations = 8 * 32 + 8 * 4
    assert summarize(tg, s).peak_memory_bytes == (4 * (3 * weights + activations), 0, 0, 0)


def test_sample_split_batch_norm_pays_its_statistics_all_reduce():
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 4, 4, 4))
    model.batch_norm(x, name="bn")
    graph, machine = model.graph(), parse_machine("p100:1")
    whole = build(graph, machine, [ParallelConfig((1, 1, 1, 1), (0,))])[0]
    split = build(graph, machine, [ParallelConfig((2, 1, 1, 1), (0, 1))])[0]
    channels = build(graph, machine, [ParallelConfig((1, 2, 1, 1), (0, 1))])[0]
    exe = lambda tg: tg.exe[task(tg, "bn[0].fwd")]  # noqa: E731
    assert exe(split) > exe(channels)  # same tile volume, but the sample split waits for statistics
    assert exe(whole) > exe(channels)


@pytest.mark.parametrize("preset", ["p100:1", "k80:2", "dgx-h100:1", "local"])
@pytest.mark.parametrize(
    "model",
    ["alexnet", "inception_v3", "resnet101", "rnntc", "rnnlm", "nmt", "lenet", "transformer"],
)
def test_every_zoo_model_simulates_on_every_preset(model, preset, capsys):
    import json

    from flexflow.cli import main

    assert main(["simulate", model, "--machine", preset, "--strategy", "expert", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["iteration_ms"] > 0 and result["num_tasks"] > 0
    assert result["compute_ms_total"] > 0
