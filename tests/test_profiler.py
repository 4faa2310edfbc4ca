"""The profiler measures every distinct task of a model on the CPU devices; the simulator uses it."""

from __future__ import annotations

import json

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.cli import main
from flexflow.cost import CostModel, Profile, cost_key
from flexflow.machine_presets import local_machine
from flexflow.ops import blas
from flexflow.ops.base import region_shape
from flexflow.profiler import TASK_OVERHEAD_S, coverage_note, profile_coverage, profile_graph
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.space import enumerate_configs
from flexflow.strategies import data_parallel_over, named_strategy


def small_graph():
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 2, 6, 6), name="x")
    x = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(model.flat(x), 5))
    return model.graph()


def test_every_distinct_tile_is_measured_and_prices_the_simulation(tmp_path):
    graph, machine = small_graph(), local_machine("--cpus 2 --gpus 0")
    seen = []
    profile = profile_graph(graph, machine, repeats=1, on_op=lambda done, total: seen.append(done))
    assert seen == list(range(1, len(graph.ops) + 1))
    model = machine.devices[0].model
    for node in graph.ops:
        for config in enumerate_configs(node.sig, machine):
            shape = region_shape(config.task_regions(node.sig.output_shape)[0])
            key = cost_key(node, shape, model, graph.computes_input_grads(node.id))
            time = profile.times[key]
            assert time.forward_s > TASK_OVERHEAD_S and time.backward_s > TASK_OVERHEAD_S
    # an update over the model's weights: a rate in bytes per second. This graph's few weights
    # make it mostly call overhead, which a busy host slows (76 and 6.7 MB/s measured once each
    # against the usual few hundred), so the bound only catches a rate in the wrong direction
    # (seconds per byte); test_an_update_is_timed_in_bytes_per_second checks the formula
    assert profile.update_bytes_per_s[model] > 1e5
    # each op inside the C step of the whole model split by sample over 1 and 2 CPUs
    for degree in (1, 2) if blas.sgemm_address() is not None else ():
        split = data_parallel_over(graph, degree)
        for node, config in zip(graph.ops, split.configs, strict=True):
            shape = region_shape(config.task_regions(node.sig.output_shape)[0])
            grads = graph.computes_input_grads(node.id)
            assert cost_key(node, shape, model, grads) in profile.native_times
    profile.save(tmp_path / "p.json")
    loaded = Profile.load(tmp_path / "p.json")
    assert loaded.times == profile.times
    assert loaded.update_bytes_per_s == profile.update_bytes_per_s
    assert loaded.native_times == profile.native_times
    op_by_op = loaded.op_by_op()  # the same without the C step times
    assert op_by_op.native_times == {} and op_by_op.times == loaded.times
    # the simulator takes the measured times where it has them
    dp = named_strategy("dp", graph, machine)
    measured = SimContext(graph, machine, CostModel(loaded))
    node = graph.ops[0]  # reads the model input: timed without the input gradient
    region = dp[0].task_regions(node.sig.output_shape)[0]
    key = cost_key(node, region_shape(region), model, input_grads=False)
    assert measured.task_time(0, dp[0].degrees, machine.devices[0]) == loaded.times[key]
    assert full_simulate(TaskGraph(measured, dp)).iteration_s > 0


def test_an_op_reading_only_model_inputs_is_timed_apart_from_the_same_op_elsewhere():
    """Two equal dense layers, the first reading the model input (its backward computes no
    input gradient), the second the first's output: two profile entries, each priced by its
    own (one entry used to serve both, measured whichever way came first)."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16), name="x")
    x = model.dense(model.dense(x, 16, ActiMode.AC_MODE_RELU), 16, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(x, 4))
    graph, machine = model.graph(), local_machine("--cpus 2 --gpus 0")
    first, second = graph.ops[0], graph.ops[1]
    assert first.op == second.op and first.sig == second.sig
    assert [graph.computes_input_grads(op) for op in (0, 1)] == [False, True]
    profile = profile_graph(graph, machine, repeats=1)
    context = SimContext(graph, machine, CostModel(profile))
    device, model_name = machine.devices[0], machine.devices[0].model
    keys = [cost_key(node, (8, 16), model_name, op == 1) for op, node in enumerate((first, second))]
    assert keys[0] != keys[1] and all(key in profile.times for key in keys)
    for op, key in enumerate(keys):
        assert context.task_time(op, (1, 1), device) == profile.times[key]


def test_cli_profile_writes_a_profile_that_simulate_reads(tmp_path, capsys):
    path = tmp_path / "lenet.json"
    assert main(["profile", "lenet", "--machine", "local", "--batch-size", "4",
                 "--repeats", "1", "--out", str(path)]) == 0  # fmt: skip
    assert "task times of lenet measured" in capsys.readouterr().out
    assert Profile.load(path).times
    assert main(["simulate", "lenet", "--machine", "local", "--batch-size", "4",
                 "--profile", str(path), "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["c_steps"] is False  # the paper's simulator
    # as a training run plans it: data parallelism's steps priced as the profile's C steps
    assert main(["simulate", "lenet", "--machine", "local", "--batch-size", "4",
                 "--profile", str(path), "--fused-launches", "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["c_steps"] is (blas.sgemm_address() is not None)
    assert "note: profile" not in capsys.readouterr().err  # it holds every task
    # another batch size's profile, or a machine without CPUs: used, with a note on what it misses
    assert main(["simulate", "lenet", "--machine", "local", "--batch-size", "8",
                 "--profile", str(path), "--json"]) == 0  # fmt: skip
    assert "holds 0 of the 30 distinct CPU tasks of this model on 'local' at batch 8" in " ".join(
        capsys.readouterr().err.split()
    )
    assert main(["simulate", "lenet", "--machine", "p100:1", "--profile", str(path)]) == 0
    note = " ".join(capsys.readouterr().err.split())
    assert "holds 0 of the 79 distinct GPU tasks of this model on 'p100:1' at batch 64" in note
    assert "scripts/gpu_profile.py lenet --machine p100:1 --batch-size 64" in note


def test_a_profiles_coverage_counts_the_tasks_it_holds_and_merging_adds_them():
    graph, machine = small_graph(), local_machine("--cpus 2 --gpus 0")
    profile = profile_graph(graph, machine, repeats=1)
    held, total = profile_coverage(profile, graph, machine)
    assert held == total == len(profile.times) > 0
    wider = FFModel(FFConfig(batch_size=16))  # the same layers at another batch size
    x = wider.create_tensor((16, 2, 6, 6), name="x")
    x = wider.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
    wider.softmax(wider.dense(wider.flat(x), 5))
    other = wider.graph()
    assert profile_coverage(profile, other, machine) == (0, total)
    both = profile.merged(profile_graph(other, machine, repeats=1))
    assert profile_coverage(both, graph, machine) == (total, total)
    assert profile_coverage(both, other, machine) == (total, total)
    assert coverage_note("p.json", both, other, machine) == ""


def test_a_machine_without_cpus_or_no_repeats_is_refused(tmp_path, capsys):
    import pytest

    from flexflow.errors import FlexFlowError
    from flexflow.machine import parse_machine

    with pytest.raises(FlexFlowError, match="no CPU devices to measure"):
        profile_graph(small_graph(), parse_machine("p100:1"))
    with pytest.raises(FlexFlowError, match="repeats must be at least 1"):
        profile_graph(small_graph(), local_machine("--cpus 1 --gpus 0"), repeats=0)
    code = main(["profile", "lenet", "--machine", "p100:1", "--out", str(tmp_path / "p.json")])
    assert code == 2 and not (tmp_path / "p.json").exists()
    assert "use --machine local" in capsys.readouterr().err


def test_a_tile_is_timed_with_its_configurations_tasks_running_at_once(monkeypatch):
    """Tiles of a configuration of n tasks are timed n at a time (here at most 2 CPUs), each
    copy in its own thread, started together."""
    import threading
    import time

    from flexflow import profiler

    graph, machine = small_graph(), local_machine("--cpus 2 --gpus 0")
    node = graph.ops[0]
    calls = []
    forward = type(node.op).forward_tile

    def recorded(self, *args):
        begin = time.perf_counter()
        time.sleep(0.01)  # releases the interpreter lock, as numpy's large calls do
        calls.append((threading.get_ident(), begin, time.perf_counter()))
        return forward(self, *args)

    monkeypatch.setattr(type(node.op), "forward_tile", recorded)
    dp = named_strategy("dp", graph, machine)
    profiler.measure_tile(node, dp[0].task_regions(node.sig.output_shape)[0], 2, concurrent=2)
    timed = calls[2:]  # after each copy's warm-up call
    assert len(timed) == 4 and len({thread for thread, _, _ in timed}) == 2
    first, second = sorted(timed, key=lambda c: c[1])[:2]
    assert second[1] < first[2]  # the two copies ran at the same time
    seen = {}

    grads = {}

    def measure(n, region, repeats, concurrent, input_grads):
        seen[n.id, region_shape(region)] = concurrent
        grads[n.id] = input_grads
        return profiler.TaskTime(1.0, 1.0)

    monkeypatch.setattr(profiler, "measure_tile", measure)
    profiler.profile_graph(graph, machine, repeats=1)
    for config in enumerate_configs(node.sig, machine):
        shape = region_shape(config.task_regions(node.sig.output_shape)[0])
        assert seen[node.id, shape] == min(config.num_tasks, 2)
    assert set(seen.values()) == {1, 2}
    # the first op reads only the model input, whose gradient the runtime never computes
    assert grads == {op.id: op.id != 0 for op in graph.ops}


def test_a_failing_copy_stops_the_others_and_its_error_is_raised():
    import pytest

    from flexflow.profiler import median_seconds

    def fails():
        raise ValueError("tile kernel failed")

    with pytest.raises(ValueError, match="tile kernel failed"):
        median_seconds([lambda: None, fails, lambda: None], repeats=3)  # would wait forever


def test_an_update_is_timed_in_bytes_per_second(monkeypatch):
    """The rate is the bytes an update moves (UPDATE_BYTES_PER_ELEMENT a weight) over the
    median time of one update, whatever the host's speed: with the timer fixed at 0.5 s."""
    from flexflow import profiler
    from flexflow.cost import UPDATE_BYTES_PER_ELEMENT

    monkeypatch.setattr(profiler, "median_seconds", lambda runs, repeats: 0.5)
    assert profiler.measure_update(1000, repeats=1) == UPDATE_BYTES_PER_ELEMENT * 1000 / 0.5
