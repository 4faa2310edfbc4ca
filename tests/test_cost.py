"""Cost model: the analytic roofline, caching on the paper's key, measured profiles overriding it."""

from __future__ import annotations

import pytest

from flexflow import ActiMode, FFModel
from flexflow.cost import DEVICE_CONSTANTS, GPU_EFFICIENCY, CostModel, Profile, TaskTime, cost_key
from flexflow.errors import FlexFlowError
from flexflow.machine import parse_machine
from flexflow.ops.base import full_region


def graph():
    model = FFModel()
    x = model.create_tensor((64, 4096), name="x")
    h = model.dense(x, 4096, name="fc")
    model.relu(h, name="act")
    return model.graph()


def test_a_big_gemm_is_compute_bound():
    g, p100 = graph(), parse_machine("p100:1").device(0)
    fc = g.op("fc")
    time = CostModel().task_time(fc, full_region(fc.sig.output_shape), p100)
    flops = 2 * 64 * 4096 * 4096 + 64 * 4096
    expected = DEVICE_CONSTANTS["gpu"].launch_overhead_s + flops / (
        p100.peak_flops * GPU_EFFICIENCY["dense"]
    )
    assert time.forward_s == pytest.approx(expected)
    overhead = DEVICE_CONSTANTS["gpu"].launch_overhead_s
    assert time.backward_s - overhead == pytest.approx(2 * (time.forward_s - overhead), rel=0.01)


def test_an_element_wise_op_is_memory_bound():
    g, p100 = graph(), parse_machine("p100:1").device(0)
    act = g.op("act")
    time = CostModel().task_time(act, full_region(act.sig.output_shape), p100)
    moved = 2 * 64 * 4096 * 4
    bandwidth = p100.memory_bandwidth_bytes_per_s * DEVICE_CONSTANTS["gpu"].memory_efficiency
    assert time.forward_s == pytest.approx(
        DEVICE_CONSTANTS["gpu"].launch_overhead_s + moved / bandwidth
    )


def test_a_cpu_kind_moves_its_bytes_at_its_own_fitted_rate():
    """CPU kinds have their own memory efficiency (benchmarks/cost_fit.py); updates and kinds
    without one take the device kind's."""
    model = FFModel()
    x = model.create_tensor((64, 4096), name="x")
    model.concat([x, x], axis=1, name="both")
    both, core = model.graph().op("both"), parse_machine("local").device(0)
    cpu = DEVICE_CONSTANTS["cpu"]
    time = CostModel().task_time(both, full_region(both.sig.output_shape), core)
    rate = core.memory_bandwidth_bytes_per_s * cpu.kind_memory_efficiency["concat"]
    moved = 2 * 2 * 64 * 4096 * 4  # (no arithmetic: reads both inputs, writes them)
    assert time.forward_s == pytest.approx(cpu.launch_overhead_s + moved / rate)
    assert cpu.memory_efficiency_of("concat") != cpu.memory_efficiency
    assert cpu.memory_efficiency_of("no such kind") == cpu.memory_efficiency


def test_splitting_shrinks_the_task_and_slower_devices_take_longer():
    g = graph()
    fc = g.op("fc")
    model = CostModel()
    p100, k80 = parse_machine("p100:1").device(0), parse_machine("k80:1").device(0)
    overhead = DEVICE_CONSTANTS["gpu"].launch_overhead_s
    whole = model.task_time(fc, ((0, 64), (0, 4096)), p100).forward_s
    half = model.task_time(fc, ((0, 32), (0, 4096)), p100).forward_s
    assert half - overhead == pytest.approx((whole - overhead) / 2, rel=0.01)
    assert model.task_time(fc, ((0, 64), (0, 4096)), k80).forward_s > 2 * whole


def test_tasks_with_the_same_tile_shape_share_one_cached_time():
    g, p100 = graph(), parse_machine("p100:1").device(0)
    fc = g.op("fc")
    model = CostModel()
    first = model.task_time(fc, ((0, 32), (0, 4096)), p100)
    assert model.task_time(fc, ((32, 64), (0, 4096)), p100) is first
    assert len(model._cache) == 1


def test_a_measured_profile_overrides_the_analytic_time(tmp_path):
    g, p100 = graph(), parse_machine("p100:1").device(0)
    fc = g.op("fc")
    key = cost_key(fc, (64, 4096), p100.model)
    path = Profile({key: TaskTime(1.5e-3, 3.0e-3)}).save(tmp_path / "profile.json")
    model = CostModel(Profile.load(path))
    assert model.task_time(fc, full_region((64, 4096)), p100) == TaskTime(1.5e-3, 3.0e-3)
    # keys differ in hyperparameters: a dense with another activation is not overridden
    other = FFModel()
    x = other.create_tensor((64, 4096))
    other.dense(x, 4096, ActiMode.AC_MODE_RELU, name="fc")
    node = other.graph().op("fc")
    assert model.task_time(node, full_region((64, 4096)), p100) != TaskTime(1.5e-3, 3.0e-3)


def test_a_measured_update_rate_prices_the_updates(tmp_path):
    from flexflow.cost import DEVICE_CONSTANTS, UPDATE_BYTES_PER_ELEMENT, StaleProfileError

    p100 = parse_machine("p100:1").device(0)
    analytic = CostModel().update_time(1_000_000, p100)
    path = Profile({}, {p100.model: 2e9}).save(tmp_path / "profile.json")
    loaded = Profile.load(path)
    assert loaded.update_bytes_per_s == {p100.model: 2e9}
    measured = CostModel(loaded).update_time(1_000_000, p100)
    launch = DEVICE_CONSTANTS["gpu"].launch_overhead_s
    assert measured == pytest.approx(launch + UPDATE_BYTES_PER_ELEMENT * 1_000_000 / 2e9)
    assert measured != analytic
    # a profile measured by an older flexflow (tiles timed alone; numpy updates; no C steps)
    for version in (1, 2, 4, 5):
        old = tmp_path / "old.json"
        old.write_text(f'{{"format": "flexflow-profile", "version": {version}, "entries": []}}')
        with pytest.raises(StaleProfileError, match="older flexflow measured it.*re-measure it"):
            Profile.load(old)


_ENTRY = '{"kind": "dense", "attributes": {}, "inputs": [[8, 4]], "tile": [8, 2], "device": "c"'


@pytest.mark.parametrize(
    "text",
    [
        "{",
        "[" * 100_000 + "]" * 100_000,
        "[]",
        '{"format": "flexflow-profile", "version": 6, "entries": ['
        + _ENTRY
        + ', "forward_s": Infinity, "backward_s": 0.1}]}',
        '{"format": "flexflow-profile", "version": 6, "entries": ['
        + _ENTRY
        + ', "forward_s": -0.001, "backward_s": 0.1}]}',
        '{"format": "flexflow-profile", "version": 6, "entries": ['
        + _ENTRY
        + ', "forward_s": 1'
        + "0" * 400
        + ', "backward_s": 0.1}]}',
        '{"format": "flexflow-profile", "version": 6, "entries": [], '
        '"updates": [{"device": "CPU core", "bytes_per_s": Infinity}]}',
        '{"format": "other"}',
        '{"format": "flexflow-profile", "version": 1}',
        '{"format": "flexflow-profile", "version": 6, "entries": [], '
        '"updates": [{"device": "CPU core", "bytes_per_s": 0}]}',
        '{"format": "flexflow-profile", "version": 6, "entries": [], '
        '"native_entries": [{"kind": "dense"}]}',
    ],
)
def test_bad_profile_files(tmp_path, text):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(FlexFlowError, match=r"profile file .* (cannot be used|malformed|nests)"):
        Profile.load(path)  # infinite, negative and huge times were taken (a search failed)


def _profile(entries: str, updates: str = "[]") -> str:
    return f'{{"format": "flexflow-profile", "version": 6, "entries": {entries}, "updates": {updates}}}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_profile(f'[{_ENTRY}, "forward_s": "x", "backward_s": 0.1}}]'),
         r"entry 0 \('dense'\): forward_s must be finite non-negative seconds, got 'x'"),
        (_profile(f'[{_ENTRY}, "forward_s": "0.5", "backward_s": 0.1}}]'), r"got '0.5'"),
        (_profile(f'[{_ENTRY}, "forward_s": true, "backward_s": 0.1}}]'), r"got True"),
        (_profile('"abc"'), r'"entries" must be a list of task times, got str'),
        (_profile("null"), r'"entries" must be a list of task times, got NoneType'),
        (_profile("{}"), r'"entries" must be a list of task times, got dict'),
        (_profile(f'[{_ENTRY.replace("[[8, 4]]", "5")}, "forward_s": 1, "backward_s": 0.1}}]'),
         r'"tile" and each of "inputs" must be lists of integers'),
        (_profile(f'[{_ENTRY}, "forward_s": 1, "backward_s": 0.1, "extra": 1}}]'),
         r"entry 0 must be an object with fields"),
        (_profile(f'[{_ENTRY}, "forward_s": 1, "backward_s": 0.1}}, '
                  f'{_ENTRY}, "forward_s": 2, "backward_s": 0.1}}]'),
         r"entry 1 \('dense'\) times the same task as an earlier entry, differently"),
        (_profile("[]", '[{"device": "c", "bytes_per_s": "1e9"}]'), r'"updates" entry 0 must be'),
        ('{"format": "flexflow-profile", "version": 99, "entries": []}',
         r"a newer flexflow wrote it \(profile version 99; this one reads 6\)"),
    ],
)  # fmt: skip
def test_a_bad_profile_entry_is_named_with_what_is_wrong(tmp_path, text, message):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(FlexFlowError, match=r"profile file .* cannot be used: .*" + message):
        Profile.load(path)


def test_transfer_time_is_latency_plus_size_over_bandwidth():
    link = parse_machine("p100:1").route(0, 1)[0]
    assert link.transfer_s(20e9) == pytest.approx(
        link.latency_s + 20e9 / link.bandwidth_bytes_per_s
    )


def test_a_profile_measured_before_element_wise_functions_still_prices_activations():
    """Element_unary gained `function` and `scalar`; at their defaults they stay out of the
    cost key, so the H200 profile's relu entries (keyed {"activation": "relu"}) still match."""
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks/results/gpu-profiles-h200/zoo-dgx-h200.json"
    model = FFModel()
    x = model.create_tensor((64, 256, 56, 56))
    model.relu(x, name="act")
    act, h200 = model.graph().op("act"), parse_machine("dgx-h200:1").device(0)
    measured = CostModel(Profile.load(path)).task_time(act, full_region((64, 256, 56, 56)), h200)
    assert measured == TaskTime(0.000280010000001264, 0.0002645429999969429)
