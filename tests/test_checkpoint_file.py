"""The checkpoint's record keeps the strategy its run trained with, so a resumed run continues
under it (flexflow.checkpoint; the arrays' round trip is tests/runtime/test_checkpoint.py's)."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow import FFConfig
from flexflow.checkpoint import checkpoint_optimizer, checkpoint_strategy, write_checkpoint
from flexflow.errors import StrategyError
from flexflow.machine import parse_machine
from flexflow.optimizers import SGDOptimizer
from flexflow.strategies import named_strategy
from flexflow.strategy_file import strategy_to_json
from flexflow.zoo import load_model

GRAPH = load_model("lenet", FFConfig(batch_size=8)).graph()


def test_a_checkpoint_gives_back_its_runs_strategy(tmp_path):
    machine = parse_machine("p100:1")
    strategy = named_strategy("random", GRAPH, machine, 3)
    path = tmp_path / "c.npz"
    arrays = {"w": np.zeros(3, np.float32)}
    write_checkpoint(path, arrays, 7, SGDOptimizer(0.1), strategy_to_json(strategy, GRAPH, machine))
    assert checkpoint_strategy(path, GRAPH, machine) == strategy
    assert checkpoint_optimizer(path) == SGDOptimizer(0.1)
    write_checkpoint(path, arrays, 7, SGDOptimizer(0.1))  # saved without one
    assert checkpoint_strategy(path, GRAPH, machine) is None


def test_a_checkpoints_strategy_that_does_not_fit_this_machine_says_how_to_go_on(tmp_path):
    big = parse_machine("p100:4")  # 16 devices
    strategy = named_strategy("dp", GRAPH, big)
    path = tmp_path / "c.npz"
    write_checkpoint(path, {}, 1, SGDOptimizer(0.1), strategy_to_json(strategy, GRAPH, big))
    with pytest.raises(
        StrategyError, match=r"(?s)checkpoint .*c\.npz is not valid.*--import-strategy FILE"
    ):
        checkpoint_strategy(path, GRAPH, parse_machine("p100:1"))


def test_an_unreadable_checkpoint_is_an_error(tmp_path):
    path = tmp_path / "c.npz"
    path.write_bytes(b"not a zip")
    with pytest.raises(StrategyError, match="cannot read checkpoint"):
        checkpoint_strategy(path, GRAPH, parse_machine("p100:1"))
