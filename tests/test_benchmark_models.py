"""The paper's graphs as FlexFlow's own code built them (benchmarks/models), which Table 4's
benchmark times the search on next to the zoo's real networks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flexflow.ops import ActiMode
from flexflow.zoo import load_model

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_resnet101_flexflow_is_the_research_simulators_chain() -> None:
    """105 ops in one chain: the stem conv and pool, 33 bottleneck blocks of three ReLU convs
    (no batch norm, no shortcut), the average pool, flat, dense and softmax; each stage ends at
    ResNet's shape."""
    model = load_model(str(BENCHMARKS / "models" / "resnet101_flexflow.py"))
    graph = model.graph()
    assert [n.kind for n in graph.ops] == [
        "conv2d", "pool2d", *["conv2d"] * 99, "pool2d", "flat", "dense", "softmax",
    ]  # fmt: skip
    for previous, node in zip(graph.ops, graph.ops[1:], strict=False):
        assert [graph.tensor(t).producer for t in node.inputs] == [previous.id]
    convs = [n for n in graph.ops if n.kind == "conv2d"]
    assert all(n.op.activation is ActiMode.AC_MODE_RELU for n in convs)
    batch = model.config.batch_size
    stage_ends = {n.name: n.sig.output_shape for n in convs if n.name.endswith("_conv3")}
    assert stage_ends["block1_2_conv3"] == (batch, 256, 56, 56)
    assert stage_ends["block2_3_conv3"] == (batch, 512, 28, 28)
    assert stage_ends["block3_22_conv3"] == (batch, 1024, 14, 14)
    assert stage_ends["block4_2_conv3"] == (batch, 2048, 7, 7)
    assert graph.ops[-1].sig.output_shape == (batch, 1000)


def test_table4_loads_the_workloads_and_compares_them_with_the_papers_model() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import table4
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert len(table4.load_workload("resnet101_flexflow").ops) == 105
    assert len(table4.load_workload("resnet101").ops) == 279
    assert table4.WORKLOADS["resnet101_flexflow"][1] == "resnet101"


def test_table4_refuses_an_unknown_model_or_machine_before_it_runs() -> None:
    for flag, value, says in (
        ("--models", "resnet102", "unknown model 'resnet102'"),
        ("--machines", "p100:x", "machine 'p100:x'"),
    ):
        run = subprocess.run(
            [sys.executable, str(BENCHMARKS / "table4.py"), flag, value, "--starts", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2
        assert says in run.stderr and "Traceback" not in run.stderr
