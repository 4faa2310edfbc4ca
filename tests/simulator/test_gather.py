"""A model with a gather simulates and searches: its SOAP configurations split every dim
(the gather dim too: each task reads the input whole along it), its tasks cost the bytes
`Gather.tile_cost` moves, delta simulation equals full, and MCMC and `flexflow search` take it."""

from __future__ import annotations

import numpy as np

from flexflow import DataType, FFConfig, FFModel
from flexflow.cli import main
from flexflow.cost import DEVICE_CONSTANTS, CostModel
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph, full_simulate
from flexflow.space import enumerate_configs
from flexflow.strategies import named_strategy

MODEL_FILE = """
from flexflow import DataType


def build(model) -> None:
    batch = model.config.batch_size
    x = model.create_tensor((batch, 32), name="x")
    index = model.create_tensor((batch, 12, 8), DataType.DT_INT32, name="index")
    h = model.reshape(model.dense(x, 16 * 8), (batch, 16, 8))
    g = model.gather(h, index, 1)
    model.dense(model.reshape(g, (batch, 96)), 10)
"""


def gather_graph(batch: int = 16):
    model = FFModel(FFConfig(batch_size=batch))
    x = model.create_tensor((batch, 32), name="x")
    index = model.create_tensor((batch, 12, 8), DataType.DT_INT32, name="index")
    h = model.reshape(model.dense(x, 16 * 8), (batch, 16, 8))  # (B, 16, 8)
    g = model.gather(h, index, 1, name="gather")  # (B, 12, 8)
    model.dense(model.reshape(g, (batch, 96)), 10)
    return model.graph()


def test_the_gathers_configurations_split_every_dim():
    graph, machine = gather_graph(), parse_machine("p100:4")
    node = graph.op("gather")
    degrees = {config.degrees for config in enumerate_configs(node.sig, machine)}
    assert {(4, 1, 1), (1, 4, 1), (1, 1, 4), (2, 2, 1), (1, 2, 2)} <= degrees


def test_a_gather_task_costs_the_bytes_it_moves():
    """Memory bound: the roofline's time is its bytes over the device's bandwidth (no FLOPs
    forward), and a tile split along the gather dim reads half the index but the input whole."""
    node, device = gather_graph().op("gather"), parse_machine("p100:1").devices[0]
    whole = ((0, 16), (0, 12), (0, 8))
    cost = node.op.tile_cost(node.sig, whole)
    assert cost.forward_flops == 0 and cost.forward_bytes_read == 16 * 12 * 8 * (4 + 4)
    constants = DEVICE_CONSTANTS["gpu"]
    rate = device.memory_bandwidth_bytes_per_s * constants.memory_efficiency_of("gather")
    time = CostModel().task_time(node, whole, device)
    moved = cost.forward_bytes_read + cost.forward_bytes_written
    assert time.forward_s == constants.launch_overhead_s + moved / rate
    half = node.op.tile_cost(node.sig, ((0, 16), (0, 6), (0, 8)))
    assert half.forward_bytes_written == cost.forward_bytes_written // 2
    assert half.backward_bytes_written == cost.backward_bytes_written  # the input whole


def test_delta_simulation_equals_full_under_random_changes():
    graph, machine = gather_graph(), parse_machine("p100:4")
    strategy = named_strategy("dp", graph, machine)
    delta = DeltaSimulator(TaskGraph(SimContext(graph, machine), strategy))
    rng = np.random.default_rng(0)
    for _ in range(20):
        op = int(rng.integers(len(graph.ops)))
        space = enumerate_configs(graph.ops[op].sig, machine)
        config = space[int(rng.integers(len(space)))]
        strategy = strategy.replace(op, config)
        delta.change(op, config)
    full = full_simulate(TaskGraph(SimContext(graph, machine), strategy))
    assert delta.iteration_s == full.iteration_s > 0


def test_mcmc_search_takes_a_model_with_a_gather():
    context = SimContext(gather_graph(), parse_machine("p100:4"))
    result = search(context, budget_s=60, seed=0, max_proposals=300)
    assert 0 < result.best_s <= result.dp_s


def test_flexflow_search_runs_on_a_model_file_with_a_gather(tmp_path, capsys):
    model = tmp_path / "gathering.py"
    model.write_text(MODEL_FILE)
    out = tmp_path / "best.json"
    code = main(["search", str(model), "--machine", "p100:2", "--budget", "2", "--export",
                 str(out)])  # fmt: skip
    assert code in (0, None)
    assert "gather_1" in out.read_text() and "gather" in capsys.readouterr().out
