"""Configurations, the SOAP space per op, named strategies and strategy files."""

from __future__ import annotations

import json
import warnings
from functools import cache

import pytest

from flexflow import FFConfig, FFModel
from flexflow.errors import FlexFlowWarning, StrategyError
from flexflow.machine import parse_machine
from flexflow.ops import TensorSpec
from flexflow.ops.dense import Dense
from flexflow.space import config_problems, enumerate_configs, space_size
from flexflow.strategies import NAMED_STRATEGIES, layer_depths, named_strategy
from flexflow.strategy import ParallelConfig, Strategy
from flexflow.strategy_file import export_strategy, load_strategy, validate_strategy
from flexflow.zoo import ZOO, load_model

PRESETS = ("p100:1", "p100:4", "k80:1", "k80:4", "k80:16", "dgx-h100:1", "dgx-h100:2")


@cache
def zoo_graph(name: str):
    return load_model(name).graph()


def tiny_graph():
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 3, 8, 8), name="image")
    t = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="conv")
    a = model.pool2d(t, 2, 2, 2, 2, 0, 0, name="pool")
    t = model.concat([a, a], axis=1, name="cat")
    t = model.dense(model.flat(t, name="flat"), 10, name="fc")
    model.softmax(t, name="prob")
    return model.graph()


# ---- ParallelConfig and Strategy values -----------------------------------------------------------


def test_config_repr_reads_back_and_hashes():
    config = ParallelConfig((2, 1, 2), (0, 1, 2, 3))
    assert eval(repr(config)) == config
    assert hash(config) == hash(ParallelConfig((2, 1, 2), (0, 1, 2, 3)))
    assert config.num_tasks == 4


def test_task_regions_are_row_major_equal_tiles():
    regions = ParallelConfig((2, 2), (0, 1, 2, 3)).task_regions((4, 6))
    assert regions == (
        ((0, 2), (0, 3)),
        ((0, 2), (3, 6)),
        ((2, 4), (0, 3)),
        ((2, 4), (3, 6)),
    )


@pytest.mark.parametrize(
    "degrees, devices, match",
    [
        ((2, 0), (0, 0), r"degrees must be positive integers"),
        ((2, 2), (0, 1, 2), r"make 4 tasks but 3 devices are given"),
    ],
)
def test_config_rejects_malformed_values(degrees, devices, match):
    with pytest.raises(StrategyError, match=match):
        ParallelConfig(degrees, devices)


def test_strategy_replace_is_a_new_value():
    s = Strategy(("a", "b"), (ParallelConfig.single(2), ParallelConfig.single(2)))
    t = s.replace("b", ParallelConfig((2, 1), (0, 1)))
    assert s["b"] == ParallelConfig.single(2) and t["b"].num_tasks == 2
    assert s != t and hash(s) != hash(t)
    assert s.replace("b", ParallelConfig.single(2)) == s


# ---- the SOAP space -------------------------------------------------------------------------------


def test_enumeration_count_by_hand():
    # output (4, 10): sample degrees 1, 2, 4; channel degrees 1, 2 (5 and 10 exceed 4 devices).
    # tuples with product <= 4: (1,1) x 4 starts, (1,2) and (2,1) x 3 starts, (2,2) and (4,1) x 1.
    sig = Dense(10).infer("fc", [TensorSpec((4, 6))])
    machine = parse_machine("p100:1")
    configs = enumerate_configs(sig, machine)
    assert len(configs) == 4 + 2 * 3 + 2 * 1 == space_size(sig, machine)
    assert len(set(configs)) == len(configs)
    assert ParallelConfig((2, 2), (0, 1, 2, 3)) in configs
    assert ParallelConfig((1, 2), (2, 3)) in configs
    assert all(not config_problems_for(sig, c, machine) for c in configs)


def test_enumeration_skips_unsplittable_dims_and_covers_node_blocks():
    graph = tiny_graph()
    machine = parse_machine("p100:2")  # 8 devices on 2 nodes
    cat = graph.op("cat")  # (8, 8, 4, 4): channel (the concat axis) cannot be split
    configs = enumerate_configs(cat.sig, machine)
    assert all(c.degrees[1] == 1 for c in configs)
    # sample degrees 1,2,4,8 x height 1,2,4 x width 1,2,4 with product <= 8, each x (9 - n) starts
    expected = 0
    for s in (1, 2, 4, 8):
        for h in (1, 2, 4):
            for w in (1, 2, 4):
                if s * h * w <= 8:
                    expected += 9 - s * h * w
    assert len(configs) == expected
    assert ParallelConfig((4, 1, 1, 1), (4, 5, 6, 7)) in configs  # the whole second node


def config_problems_for(sig, config, machine):
    from flexflow.graph import OpNode

    return config_problems(OpNode(0, "fc", Dense(10), (0,), (1,), (), sig), config, machine)


@pytest.mark.parametrize(
    "config, match",
    [
        (
            ParallelConfig((3, 1), (0, 1, 2)),
            r"degree 3 on dimension 'sample' does not divide its size 4",
        ),
        (
            ParallelConfig((1, 1), (9,)),
            r"device\(s\) 9 do not exist on machine 'p100:1' \(devices 0-3\)",
        ),
        (ParallelConfig((4, 2), tuple(range(8))), r"8 tasks but machine 'p100:1' has 4 devices"),
        (ParallelConfig((1,), (0,)), r"1 degrees given for its rank-2 output"),
    ],
)
def test_config_problems_name_the_op_and_the_fix(config, match):
    sig = Dense(10).infer("fc", [TensorSpec((4, 6))])
    problems = config_problems_for(sig, config, parse_machine("p100:1"))
    assert any(__import__("re").search(match, p) for p in problems), problems
    assert all(p.startswith("dense 'fc':") for p in problems)


def test_unsplittable_dimension_is_reported():
    graph = tiny_graph()
    problems = config_problems(
        graph.op("cat"), ParallelConfig((1, 2, 1, 1), (0, 1)), parse_machine("p100:1")
    )
    assert problems == [
        "concat 'cat': dimension 'channel' cannot be split (degree 2 given); set it to 1. "
        "Splittable: sample, height, width."
    ]


# ---- named strategies -----------------------------------------------------------------------------


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("model", sorted(ZOO))
def test_every_named_strategy_is_valid_for_every_zoo_model(model, preset):
    graph = zoo_graph(model)
    machine = parse_machine(preset)
    for name in NAMED_STRATEGIES:
        validate_strategy(named_strategy(name, graph, machine, seed=3), graph, machine)


def test_data_parallel_splits_every_op_in_sample_over_all_devices():
    graph, machine = tiny_graph(), parse_machine("p100:2")
    s = named_strategy("dp", graph, machine)
    assert all(c.degrees[0] == 8 and c.num_tasks == 8 for c in s.configs)


def test_one_weird_trick_splits_dense_in_parameter():
    graph, machine = tiny_graph(), parse_machine("p100:1")
    s = named_strategy("expert", graph, machine)
    assert s["fc"] == ParallelConfig(
        (1, 2), (0, 1)
    )  # 10 output channels: largest divisor <= 4 is 2
    assert s["conv"] == ParallelConfig((4, 1, 1, 1), (0, 1, 2, 3))


def test_wu_et_al_puts_same_depth_layers_on_the_same_gpu_of_every_node():
    graph, machine = zoo_graph("rnnlm"), parse_machine("p100:2")
    s = named_strategy("expert", graph, machine)
    depth = layer_depths(graph)
    for node, config in zip(graph.ops, s.configs, strict=True):
        assert config.degrees[0] == 2  # data parallel across the 2 nodes
        gpu = depth[node.layer] % 4
        assert config.devices == (gpu, 4 + gpu), node.name


def test_model_parallel_runs_each_op_whole_and_spreads_layers():
    graph, machine = zoo_graph("rnnlm"), parse_machine("p100:1")
    s = named_strategy("model", graph, machine)
    assert all(c.num_tasks == 1 for c in s.configs)
    assert len(s.devices_used()) == 4


def test_random_is_seeded():
    graph, machine = tiny_graph(), parse_machine("p100:1")
    a, b = (named_strategy("random", graph, machine, seed=7) for _ in range(2))
    assert a == b
    assert a != named_strategy("random", graph, machine, seed=8)


def test_unknown_strategy_name():
    with pytest.raises(
        StrategyError, match=r"unknown strategy name 'best'; choose one of dp, expert"
    ):
        named_strategy("best", tiny_graph(), parse_machine("p100:1"))


# ---- strategy files -------------------------------------------------------------------------------


def test_the_top_level_fields_checked_are_those_written(tmp_path):
    from flexflow.strategy_file import FILE_KEYS

    data, _, _ = _valid(tmp_path)
    assert set(data) == FILE_KEYS


def test_top_level_problems_are_listed_with_a_malformed_ops_list(tmp_path):
    data, graph, machine = _valid(tmp_path)
    bad = {**data, "extra": 1, "ops": "none"}
    with pytest.raises(StrategyError, match=r"(?s)\(2 problem\(s\)\).*'extra'.*\"ops\" must be"):
        load_strategy(_write(tmp_path, bad), graph, machine)


def test_export_import_round_trip(tmp_path):
    graph, machine = zoo_graph("inception_v3"), parse_machine("k80:4")
    s = named_strategy("random", graph, machine, seed=1)
    path = export_strategy(tmp_path / "s.json", s, graph, machine, model="inception_v3")
    assert load_strategy(path, graph, machine) == s
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left nothing behind


def test_a_strategy_file_written_for_another_machine_loads_with_a_warning(tmp_path):
    """Configurations that fit another machine of as many devices were used silently, though
    they were searched for its devices and links."""
    graph = zoo_graph("lenet")
    p100, k80 = parse_machine("p100:1"), parse_machine("k80:1")
    s = named_strategy("dp", graph, p100)
    path = export_strategy(tmp_path / "s.json", s, graph, p100, model="lenet")
    with pytest.warns(FlexFlowWarning, match=r"written for machine 'p100:1' \(4 devices\) and "
                      r"is used on 'k80:1' \(4 devices\).*flexflow search lenet --machine k80:1 "
                      r"--init"):  # fmt: skip
        assert load_strategy(path, graph, k80) == s
    # the same name, another device count: every host's machine is `local`
    data = json.loads(path.read_text())
    data.update(machine="local", num_devices=2)
    path.write_text(json.dumps(data))
    with pytest.warns(FlexFlowWarning, match=r"'local' \(2 devices\) and is used on 'p100:1'"):
        load_strategy(path, graph, p100)
    with warnings.catch_warnings():  # a search's starting point: the search adapts it
        warnings.simplefilter("error")
        assert load_strategy(path, graph, k80, warn_other_machine=False) == s
    path.write_text(json.dumps({**data, "machine": "p100:1", "num_devices": 4}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # on its own machine: nothing to say
        assert load_strategy(path, graph, p100) == s


def test_a_strategy_file_written_for_another_batch_size_loads_with_a_warning(tmp_path):
    """Searched at 128 samples a batch, it was simulated at 64 without a word (20.1 ms at 128
    for the search, 39.0 ms for simulate at 64 on k80:4: a helper's runs)."""
    from flexflow.zoo import load_model

    machine = parse_machine("p100:1")
    large = load_model("lenet", FFConfig(batch_size=128)).graph()
    small = zoo_graph("lenet")  # 64 a batch
    s = named_strategy("dp", large, machine)
    path = export_strategy(tmp_path / "s.json", s, large, machine, model="lenet")
    assert json.loads(path.read_text())["batch_size"] == 128
    with pytest.warns(FlexFlowWarning, match=r"written for batches of 128 and this model takes "
                      r"batches of 64: .* search again \(`flexflow search lenet --machine "
                      r"p100:1 --batch-size 64 --init "):  # fmt: skip
        assert load_strategy(path, small, machine) == s
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # its own batch size; and a file without one
        load_strategy(path, large, machine)
        data = json.loads(path.read_text())
        del data["batch_size"]
        path.write_text(json.dumps(data))
        load_strategy(path, small, machine)


def test_a_dense_layer_on_images_keeps_every_split_in_a_strategy_file(tmp_path):
    """A dense layer over (N, H, W, C) named two dims "channel": the file, keyed by dim name,
    lost one of their degrees and the strategy could not be read back."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 2, 3, 6), name="maps")
    model.dense(x, 8, name="fc")
    graph, machine = model.graph(), parse_machine("p100:1")
    assert [d.name for d in graph.ops[0].sig.dims] == ["sample", "height", "width", "channel"]
    for degrees in ((1, 1, 1, 2), (1, 2, 1, 1), (2, 1, 1, 2)):
        tasks = degrees[0] * degrees[1] * degrees[2] * degrees[3]
        split = Strategy(("fc",), (ParallelConfig(degrees, tuple(range(tasks))),))
        path = export_strategy(tmp_path / "s.json", split, graph, machine)
        assert load_strategy(path, graph, machine) == split


def _write(tmp_path, data) -> str:
    path = tmp_path / "bad.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def _valid(tmp_path):
    graph, machine = tiny_graph(), parse_machine("p100:1")
    export_strategy(tmp_path / "good.json", named_strategy("dp", graph, machine), graph, machine)
    return json.loads((tmp_path / "good.json").read_text()), graph, machine


def _edit(data, name, **fields):
    for entry in data["ops"]:
        if entry["name"] == name:
            entry.update(fields)
    return data


@pytest.mark.parametrize(
    "mutate, match",
    [
        (
            lambda d: {**d, "ops": d["ops"] + [{"name": "ghost", "degrees": {}, "devices": [0]}]},
            r"unknown op 'ghost': model has no such op; remove it",
        ),
        (
            lambda d: {**d, "ops": [e for e in d["ops"] if e["name"] != "fc"]},
            r"dense 'fc': has no configuration; add an entry for it",
        ),
        (
            lambda d: _edit(d, "conv", degrees={"sample": 3}, devices=[0, 1, 2]),
            r"conv2d 'conv': degree 3 on dimension 'sample' does not divide its size 8",
        ),
        (
            lambda d: _edit(d, "conv", degrees={"sample": 8}, devices=list(range(8))),
            r"conv2d 'conv': 8 tasks but machine 'p100:1' has 4 devices",
        ),
        (
            lambda d: _edit(d, "fc", degrees={"sample": 1}, devices=[5]),
            r"dense 'fc': device\(s\) 5 do not exist on machine 'p100:1'",
        ),
        (
            lambda d: _edit(d, "cat", degrees={"channel": 2}, devices=[0, 1]),
            r"concat 'cat': dimension 'channel' cannot be split",
        ),
        (
            lambda d: _edit(d, "pool", degrees={"depth": 2}, devices=[0, 1]),
            r"pool2d 'pool': has no dimension 'depth' \(dimensions: sample, channel, height, width\)",
        ),
        (
            lambda d: _edit(d, "pool", degrees={"sample": 2}, devices=[0]),
            r"pool2d 'pool': degrees .* make 2 tasks but 1 devices are listed",
        ),
        (
            lambda d: {**d, "version": 9},
            r"bad.json' has version 9; this flexflow reads \"version\": 1",
        ),
        (lambda d: {**d, "version": "1"}, r"bad.json' has version '1'; .* \(a number\)"),
        (
            lambda d: _edit(d, "fc", degree={"sample": 1}),
            r"dense 'fc': unknown field\(s\) 'degree'; an entry holds",
        ),
        (
            lambda d: {**d, "model": "rnnlm", "ops": [{"name": "lstm", "devices": [0]}]},
            r"is another model's strategy \(it names model 'rnnlm'\): none of its 1 ops",
        ),
        (  # one of a family sharing some op names: a line per foreign op before
            lambda d: {
                **d,
                "model": "big",
                "ops": [*d["ops"][:2], *({"name": f"x{i}", "devices": [0]} for i in range(5))],
            },
            r"another model's strategy \(it names model 'big'\): only 2 of its 7 ops are among",
        ),
        (lambda d: {**d, "format": "other"}, r"not a strategy file"),
        (
            lambda d: {**d, "fo": 1},
            r"unknown top-level field\(s\) 'fo'; a strategy file holds 'batch_size', 'format', 'machine'",
        ),
        (lambda d: {**d, "num_devices": "8"}, r'"num_devices" must be an integer, got \'8\''),
        (
            lambda d: _edit({**d, "model": "alexnet"}, "fc", devices=[5]),
            r"bad.json' \(written for model 'alexnet'\) is not valid",
        ),
    ],
)
def test_each_bad_file_gets_its_own_clear_error(tmp_path, mutate, match):
    data, graph, machine = _valid(tmp_path)
    with pytest.raises(StrategyError, match=match):
        load_strategy(_write(tmp_path, mutate(data)), graph, machine)


def test_every_problem_is_listed_at_once(tmp_path):
    data, graph, machine = _valid(tmp_path)
    _edit(data, "conv", degrees={"sample": 3}, devices=[0, 1, 2])
    _edit(data, "fc", degrees={"sample": 1}, devices=[5])
    with pytest.raises(StrategyError, match=r"\(2 problem\(s\)\)") as info:
        load_strategy(_write(tmp_path, data), graph, machine)
    assert "conv2d 'conv'" in str(info.value) and "dense 'fc'" in str(info.value)


def test_a_field_given_twice_is_refused_not_read_as_either(tmp_path):
    """JSON readers keep one of the two values; a hand-edited file must not pass as either."""
    data, graph, machine = _valid(tmp_path)
    text = json.dumps(data).replace('"devices": [0, 1, 2, 3]', '"devices": [0, 1, 2, 3], '
                                    '"devices": [3, 2, 1, 0]', 1)  # fmt: skip
    assert text.count('"devices": [3, 2, 1, 0]') == 1
    with pytest.raises(StrategyError, match=r"bad.json gives 'devices' twice in one object"):
        load_strategy(_write(tmp_path, text), graph, machine)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", r"bad.json is empty; re-export it"),
        (
            '{"format": "flexflow-strategy", "ops": [',
            r"malformed or truncated: .* at line 1 column",
        ),
        ("not json", r"malformed or truncated: .* at line 1 column"),
        ("[" * 100_000 + "]" * 100_000, r"its JSON nests too deeply"),
    ],
)
def test_truncated_or_malformed_json(tmp_path, text, message):
    graph, machine = tiny_graph(), parse_machine("p100:1")
    with pytest.raises(StrategyError, match=message):
        load_strategy(_write(tmp_path, text), graph, machine)


def test_a_file_that_is_not_json_text_is_named_so(tmp_path):
    """A checkpoint passed as the strategy (or a Latin-1 file) was a UnicodeDecodeError
    traceback; a byte-order mark (Notepad's UTF-8) was refused."""
    graph, machine = tiny_graph(), parse_machine("p100:1")
    path = tmp_path / "c.npz"
    path.write_bytes(b"PK\x03\x04\x9e\xff")
    with pytest.raises(StrategyError, match=r"is not a JSON text file \(it is a zip archive"):
        load_strategy(path, graph, machine)
    with pytest.raises(StrategyError, match=r"'/dev/zero' is a device, not a file"):
        load_strategy("/dev/zero", graph, machine)
    good = tmp_path / "dp.json"
    export_strategy(good, named_strategy("dp", graph, machine), graph, machine)
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + good.read_bytes())
    assert load_strategy(path, graph, machine) == named_strategy("dp", graph, machine)


def test_missing_file():
    with pytest.raises(StrategyError, match=r"strategy file '/nonexistent.json' does not exist"):
        load_strategy("/nonexistent.json", tiny_graph(), parse_machine("p100:1"))


def test_a_changed_strategy_checks_its_new_configuration_and_shares_the_op_index():
    s = Strategy(("a", "b", "c"), (ParallelConfig.single(2),) * 3)
    s.index("b")  # the index is built once
    changed = s.replace("b", ParallelConfig((2, 1), (0, 1)))
    assert changed.configs[1] == ParallelConfig((2, 1), (0, 1)) and changed.ops is s.ops
    assert changed.index("c") == 2 and changed == Strategy(s.ops, changed.configs)
    assert hash(changed) == hash(Strategy(s.ops, changed.configs))
    with pytest.raises(StrategyError, match="must be a ParallelConfig"):
        s.replace_many([0, 2], ((1, 1), (0,)))
    for bad in (-1, 3):  # the copy skips the constructor's checks: an index must be one
        with pytest.raises(StrategyError, match=f"no op number {bad}; it has 3"):
            s.replace(bad, ParallelConfig.single(2))
        with pytest.raises(StrategyError, match=f"no op number {bad}"):
            s.replace_many([0, bad], ParallelConfig.single(2))


def test_a_strategy_for_a_larger_machine_is_one_line_naming_both(tmp_path):
    """Sixteen lines each saying to lower the degrees or use device ids in range."""
    graph = zoo_graph("lenet")
    p100_2 = parse_machine("p100:2")
    path = export_strategy(tmp_path / "s.json", named_strategy("dp", graph, p100_2), graph, p100_2)
    with pytest.raises(StrategyError) as info:
        load_strategy(path, graph, parse_machine("p100:1"))
    message = str(info.value)
    assert "\n" not in message
    assert "written for machine 'p100:2' (8 devices) and this one, 'p100:1', has 4" in message
    assert "pass the --machine it was written for" in message
    data = json.loads(path.read_text())  # another problem besides: the whole listing
    data["ops"] = data["ops"][1:]
    path.write_text(json.dumps(data))
    with pytest.raises(StrategyError, match=r"(?s)is not valid .*has no configuration"):
        load_strategy(path, graph, parse_machine("p100:1"))
