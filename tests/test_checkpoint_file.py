"""The checkpoint's record keeps the strategy its run trained with, so a resumed run continues
under it (flexflow.checkpoint; the arrays' round trip is tests/runtime/test_checkpoint.py's)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexflow import FFConfig
from flexflow.checkpoint import (
    DataPosition,
    checkpoint_optimizer,
    checkpoint_strategy,
    read_checkpoint,
    write_checkpoint,
)
from flexflow.errors import CheckpointError, StrategyError
from flexflow.machine import parse_machine
from flexflow.optimizers import SGDOptimizer
from flexflow.strategies import named_strategy
from flexflow.strategy_file import strategy_to_json
from flexflow.zoo import load_model

GRAPH = load_model("lenet", FFConfig(batch_size=8)).graph()
WEIGHTS = {p.name: np.zeros(p.spec.shape, np.float32) for p in GRAPH.parameters}
"""The model's weights: a checkpoint without them is another model's, refused as such."""


def test_a_checkpoint_gives_back_its_runs_strategy(tmp_path):
    machine = parse_machine("p100:1")
    strategy = named_strategy("random", GRAPH, machine, 3)
    path = tmp_path / "c.npz"
    arrays = WEIGHTS
    write_checkpoint(path, arrays, 7, SGDOptimizer(0.1), strategy_to_json(strategy, GRAPH, machine))
    assert checkpoint_strategy(path, GRAPH, machine) == strategy
    assert checkpoint_optimizer(path) == SGDOptimizer(0.1)
    write_checkpoint(path, arrays, 7, SGDOptimizer(0.1))  # saved without one
    assert checkpoint_strategy(path, GRAPH, machine) is None


def test_a_checkpoints_strategy_that_does_not_fit_this_machine_says_how_to_go_on(tmp_path):
    big = parse_machine("p100:4")  # 16 devices
    strategy = named_strategy("dp", GRAPH, big)
    path = tmp_path / "c.npz"
    write_checkpoint(path, WEIGHTS, 1, SGDOptimizer(0.1), strategy_to_json(strategy, GRAPH, big))
    with pytest.raises(
        StrategyError,
        match=r"(?s)checkpoint .*c\.npz was trained with a strategy that does not fit this run .*"
        r"--import-strategy dp .* Its 16 problem\(s\), the first: conv2d 'conv1': 8 tasks",
    ):
        checkpoint_strategy(path, GRAPH, parse_machine("p100:1"))


def test_an_unreadable_checkpoint_is_an_error(tmp_path):
    path = tmp_path / "c.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="cannot read checkpoint .*not a checkpoint"):
        checkpoint_strategy(path, GRAPH, parse_machine("p100:1"))
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        read_checkpoint(path)


def _saved(tmp_path) -> bytes:
    machine = parse_machine("p100:1")
    strategy = strategy_to_json(named_strategy("dp", GRAPH, machine), GRAPH, machine)
    arrays = {**WEIGHTS, **{f"{name}@m": np.ones_like(w) for name, w in WEIGHTS.items()}}
    write_checkpoint(tmp_path / "good.npz", arrays, 3, SGDOptimizer(0.1, momentum=0.9), strategy)
    return (tmp_path / "good.npz").read_bytes()


def _reads_or_says_so(path) -> None:
    """Every reader of a checkpoint either reads it or raises CheckpointError naming it."""
    for read in (
        read_checkpoint,
        checkpoint_optimizer,
        lambda p: checkpoint_strategy(p, GRAPH, parse_machine("p100:1")),
    ):
        try:
            read(path)
        except CheckpointError as exc:
            assert f"cannot read checkpoint {path}" in str(exc)


def test_a_truncated_or_corrupted_checkpoint_is_an_error_naming_it(tmp_path):
    data = _saved(tmp_path)
    path = tmp_path / "c.npz"
    path.write_bytes(data[: len(data) // 2])  # a copy cut short
    with pytest.raises(CheckpointError, match="damaged or truncated"):
        read_checkpoint(path)
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF  # inside the first array: its CRC no longer matches
    path.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="damaged or truncated"):
        read_checkpoint(path)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.floats(0, 1), at=st.floats(0, 1), bits=st.integers(1, 255))
def test_any_damage_to_a_checkpoint_reads_or_is_a_clear_error(tmp_path, cut, at, bits):
    data = _saved(tmp_path)
    path = tmp_path / "c.npz"
    path.write_bytes(data[: int(cut * len(data))])
    _reads_or_says_so(path)
    damaged = bytearray(data)
    damaged[min(int(at * len(data)), len(data) - 1)] ^= bits
    path.write_bytes(bytes(damaged))
    _reads_or_says_so(path)


def test_another_models_checkpoint_is_refused_as_such_before_its_strategy(tmp_path):
    machine = parse_machine("p100:1")
    other = load_model("alexnet", FFConfig(batch_size=8)).graph()
    path = tmp_path / "c.npz"
    strategy = strategy_to_json(named_strategy("dp", other, machine), other, machine)
    write_checkpoint(
        path, {"conv1.kernel": np.zeros(3, np.float32)}, 1, SGDOptimizer(0.1), strategy
    )
    with pytest.raises(CheckpointError, match="lacks 7 weight.*saved from another model"):
        checkpoint_strategy(path, GRAPH, machine)


@pytest.mark.parametrize(
    "meta, position",
    [
        ({"epochs": 2, "batch_size": 32}, DataPosition(2, 32)),
        ({}, None),  # an older checkpoint
        ({"epochs": 2}, None),
        ({"epochs": -1, "batch_size": 32}, None),
        ({"epochs": 1, "batch_size": 0}, None),
        ({"epochs": True, "batch_size": 32}, None),
        ({"epochs": "2", "batch_size": 32}, None),
    ],
)
def test_a_checkpoints_data_position_is_read_only_when_whole(meta, position):
    assert DataPosition.of(meta) == position


@pytest.mark.parametrize(
    "change, message",
    [
        ({"iteration": -5}, r"its iteration -5 is not a count"),
        ({"iteration": "ten"}, r"its iteration 'ten' is not a count"),
        ({"steps_before": -1}, r"its steps_before -1 is not a count"),
        ({"format": "flexflow-checkpoint/9"}, r"its format is 'flexflow-checkpoint/9'"),
        ({"optimizer": "adam"}, r"its optimizer 'adam' is not a JSON object"),
        ([], r"its record is a JSON list"),
    ],
)
def test_a_checkpoint_with_an_edited_record_is_refused_in_one_line(tmp_path, change, message):
    """An iteration of -5 trained to NaN and saved the NaN weights over the file; a string or
    a list was a traceback."""
    import io
    import json

    values = dict(np.load(io.BytesIO(_saved(tmp_path))))
    meta = json.loads(str(values.pop("__flexflow__")))
    meta = change if isinstance(change, list) else meta | change
    path = tmp_path / "edited.npz"
    np.savez(path, **values, __flexflow__=np.array(json.dumps(meta)))
    for read in (read_checkpoint, checkpoint_optimizer):
        with pytest.raises(CheckpointError, match=message):
            read(path)


def test_a_checkpoint_holding_nan_weights_is_refused(tmp_path):
    import io

    values = dict(np.load(io.BytesIO(_saved(tmp_path))))  # a saved file, edited or damaged
    name = next(iter(WEIGHTS))
    values[name] = np.full_like(values[name], np.nan)
    np.savez(tmp_path / "nan.npz", **values)
    with pytest.raises(CheckpointError, match=r"holds NaN or infinite values"):
        read_checkpoint(tmp_path / "nan.npz")


def test_a_diverged_run_does_not_save_over_the_last_good_checkpoint(tmp_path):
    """fit saved NaN weights over the file after a NaN in the data, losing the good one."""
    path = tmp_path / "c.npz"
    write_checkpoint(path, WEIGHTS, 3, SGDOptimizer(0.1))
    good = path.read_bytes()
    weights = {name: np.full_like(w, np.nan) for name, w in WEIGHTS.items()}
    with pytest.raises(CheckpointError, match=r"not saving checkpoint .* NaN or infinite .* the "
                       r"file keeps the last checkpoint saved"):  # fmt: skip
        write_checkpoint(path, weights, 4, SGDOptimizer(0.1))
    assert path.read_bytes() == good


def test_a_checkpoint_with_weights_this_model_lacks_is_another_models(tmp_path):
    """A larger model's checkpoint (this model's weights and more) was taken silently: the
    shared ones loaded, the rest ignored, the other run's epoch count kept."""
    machine = parse_machine("p100:1")
    arrays = {p.name: np.zeros(p.spec.shape, np.float32) for p in GRAPH.parameters}
    arrays["fc3.kernel"] = np.zeros((3, 3), np.float32)
    path = tmp_path / "c.npz"
    strategy = strategy_to_json(named_strategy("dp", GRAPH, machine), GRAPH, machine)
    write_checkpoint(path, arrays, 1, SGDOptimizer(0.1), strategy)
    with pytest.raises(
        CheckpointError, match=r"holds 1 weight\(s\) this model lacks \(fc3.kernel\)"
    ):
        checkpoint_strategy(path, GRAPH, machine)
