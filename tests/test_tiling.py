"""Where weights are updated and inputs fed: always an exact tiling, spread over the holders."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.config import FFConfig
from flexflow.machine_presets import local_machine
from flexflow.strategies import named_strategy
from flexflow.tiling import input_shards, is_tiling, update_pieces
from flexflow.zoo import load_model

MODELS = {
    "lenet": lambda: load_model("lenet", FFConfig(batch_size=8)).graph(),
    "rnnlm": lambda: load_model(
        "rnnlm", FFConfig(batch_size=8), seq_length=3, vocab_size=50, embed_size=8, hidden_size=16
    ).graph(),
    "transformer": lambda: load_model(
        "transformer",
        FFConfig(batch_size=4),
        seq_length=8,
        hidden_size=16,
        num_heads=2,
        num_layers=1,
        vocab_size=40,
        ff_size=32,
    ).graph(),
}
GRAPHS = {name: build() for name, build in MODELS.items()}


def regions_of(graph, strategy):
    return [
        config.task_regions(node.sig.output_shape)
        for node, config in zip(graph.ops, strategy.configs, strict=True)
    ]


@settings(max_examples=30, deadline=None)
@given(
    model=st.sampled_from(sorted(GRAPHS)),
    cpus=st.integers(1, 4),
    name=st.sampled_from(["dp", "model", "random"]),
    seed=st.integers(0, 1000),
)
def test_update_pieces_and_input_shards_tile_exactly(model, cpus, name, seed):
    graph = GRAPHS[model]
    machine = local_machine(f"--cpus {cpus} --gpus 0")
    strategy = named_strategy(name, graph, machine, seed)
    regions = regions_of(graph, strategy)
    pieces = update_pieces(graph, strategy, regions)
    assert set(pieces) == {p.id for p in graph.parameters}
    for pid, tiles in pieces.items():
        assert is_tiling([r for r, _ in tiles], graph.parameters[pid].spec.shape)
        assert all(0 <= device < cpus for _, device in tiles)
    shards = input_shards(graph, strategy, regions)
    for tensor in graph.input_tensors:
        assert is_tiling([r for r, _ in shards[tensor.id]], tensor.spec.shape)


def test_data_parallel_spreads_each_update_and_each_batch_over_the_devices():
    graph = GRAPHS["lenet"]
    machine = local_machine("--cpus 2 --gpus 0")
    strategy = named_strategy("dp", graph, machine)
    regions = regions_of(graph, strategy)
    by_name = {p.name: p.id for p in graph.parameters}
    kernel = update_pieces(graph, strategy, regions)[by_name["fc1.kernel"]]
    assert [device for _, device in kernel] == [0, 1]  # the replicated weight's rows, halved
    (image,) = graph.input_tensors
    shards = input_shards(graph, strategy, regions)[image.id]
    assert [(region[0], device) for region, device in shards] == [((0, 4), 0), ((4, 8), 1)]


def test_is_tiling_rejects_overlap_gaps_and_overflow():
    assert is_tiling([((0, 2),), ((2, 4),)], (4,))
    assert not is_tiling([((0, 3),), ((2, 4),)], (4,))  # overlap (and volume too large)
    assert not is_tiling([((0, 2),), ((1, 3),)], (4,))  # right volume once, but overlapping
    assert not is_tiling([((0, 2),)], (4,))
    assert not is_tiling([((2, 6),)], (4,))
