"""The task graph of a broadcasting element-wise op (paper §5.1): split along the dim one input
is repeated along, each tile is sent that input's one row, and sends its gradient back."""

from __future__ import annotations

import math

import pytest

from flexflow import FFConfig, FFModel
from flexflow.cost import CostModel
from flexflow.machine import parse_machine
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategy import ParallelConfig, Strategy


def _gated():
    """FlexFlow's Keras example elementwise_mul_broadcast: (B, 10, 1) times (B, 10, 2)."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 10, 4), name="x")
    gate = model.dense(x, 1, name="gate")  # (8, 10, 1)
    wide = model.dense(x, 2, name="wide")  # (8, 10, 2)
    model.multiply(gate, wide, name="times")
    return model.graph()


def _transfers(degrees):
    graph, machine = _gated(), parse_machine("p100:2")  # 8 GPUs: the tiles off gpu0
    whole = ParallelConfig.single(3, 0)
    tasks = tuple(range(1, 1 + math.prod(degrees)))
    strategy = Strategy(("gate", "wide", "times"), (whole, whole, ParallelConfig(degrees, tasks)))
    tg = TaskGraph(SimContext(graph, machine, CostModel()), strategy)
    full_simulate(tg)
    return {tg.name[t]: tg.size_bytes[t] for t in tg.live_tasks() if "->" in tg.name[t]}


def test_each_tile_along_the_repeated_dim_gets_the_small_inputs_row():
    """Split in two along the last dim (the gate's size 1): each tile reads the gate's whole
    (8, 10, 1) and half of wide's (8, 10, 2); the gradients travel back the same sizes."""
    row = 8 * 10 * 1 * 4
    assert _transfers((1, 1, 2)) == {
        "gate[0]->times[0]": row, "gate[0]->times[1]": row,
        "wide[0]->times[0]": row, "wide[0]->times[1]": row,
        "grad gate[0]->times[0]": row, "grad gate[0]->times[1]": row,
        "grad wide[0]->times[0]": row, "grad wide[0]->times[1]": row,
    }  # fmt: skip


def test_a_split_along_a_dim_both_inputs_have_sends_each_its_share():
    """Split along the middle dim (10, in both inputs): each tile gets half of each."""
    found = _transfers((1, 2, 1))
    assert found["gate[0]->times[0]"] == found["gate[0]->times[1]"] == 8 * 5 * 1 * 4
    assert found["wide[0]->times[0]"] == found["wide[0]->times[1]"] == 8 * 5 * 2 * 4
    assert len(found) == 8


@pytest.mark.parametrize("degrees", [(1, 1, 2), (2, 1, 2), (1, 2, 2)])
def test_the_tiles_read_the_gate_once_each(degrees):
    """Every tile of a split over the repeated dim reads all of the gate its samples and
    rows need: 1 / (the sample and middle degrees) of it."""
    found = _transfers(degrees)
    share = 8 * 10 * 4 // (degrees[0] * degrees[1])
    gate = {k: v for k, v in found.items() if k.startswith("gate")}
    assert len(gate) == degrees[0] * degrees[1] * degrees[2]
    assert set(gate.values()) == {share}
