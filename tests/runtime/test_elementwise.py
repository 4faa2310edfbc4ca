"""FlexFlow's element-wise and reduce_sum layers under Legate (2 CPUs): a model of them, and one
of the binary ops broadcasting dims of size 1, train under any strategy, split by sample or by
attribute dims (a broadcasting op along a dim one input is repeated along), as on one device
and as the numpy reference of the same rules does (the rules' derivatives are checked by
finite differences in tests/ops), and FlexFlow's per-op script flow (forward, then inline_map/get_array) reads what
numpy computes (tests/runtime/elementwise_script.py)."""

from __future__ import annotations

import pytest

from tests.runtime.scripts import run_legate_script

STRATEGIES = 4
MODELS = ["elementwise", "kept", "broadcast", "excitation"]
ADDED = {"elementwise": 1, "kept": 1, "broadcast": 2, "excitation": 3}
"""Strategies each model trains under beside the usual ones: "attribute", and "broadcast";
the excitation block's splits that fit 2 devices (elementwise_script.EXCITATION_SPLITS)."""
BROADCAST_DEGREES = {
    "element_binary_1": [1, 1, 2], "element_binary_2": [1, 2, 1],
    "element_binary_3": [1, 2, 1], "element_binary_4": [1, 1, 2],
    "element_binary_5": [1, 1, 2], "element_binary_6": [1, 1, 1],
    "element_binary_7": [1, 2, 1],
}  # fmt: skip
"""The broadcast model's binary ops under its "broadcast" strategy: split in two along the
last dim (one input (8, 4, 1)) or the middle one (one input (8, 1, 8)), so its tiles read the
small input's one row and their gradients of it are summed."""

pytestmark = pytest.mark.legate


@pytest.fixture(scope="module")
def report() -> dict:
    return run_legate_script("elementwise_script.py", str(STRATEGIES), timeout=900)


@pytest.mark.parametrize("model", MODELS)
def test_one_device_matches_the_numpy_reference(report, model):
    assert report[model]["single_vs_numpy_loss"] <= 1.0
    assert report[model]["single_vs_numpy_weights"] <= 1.0


@pytest.mark.parametrize("model", MODELS)
def test_every_strategy_trains_like_one_device(report, model):
    strategies = report[model]["strategies"]
    # one device, data parallel, mixed, random ones, every op split along an attribute dim
    # (and every broadcasting op along a dim an input is repeated along)
    assert len(strategies) == 3 + STRATEGIES + ADDED[model]
    failing = {name: r for name, r in strategies.items() if r["loss"] > 1.0 or r["weights"] > 1.0}
    assert failing == {}
    if model == "broadcast":  # its "broadcast" strategy really splits along repeated dims
        assert report["broadcast_degrees"] == BROADCAST_DEGREES
    assert len(report[model]["splits"]) >= 3  # the random strategies split ops several ways


@pytest.mark.parametrize("model", MODELS)
def test_the_launch_count_predicts_the_tasks_each_step_issues(report, model):
    """What the simulator charges the runtime's per-task cost on (flexflow.launches)."""
    counts = report[model]["task_counts"]
    assert {name: c for name, c in counts.items() if set(c[0]) != {c[1]}} == {}


@pytest.mark.parametrize(
    "model, op, degrees",
    [("elementwise", "reduce_sum reduce_sum_1", [1, 2]), ("kept", "reduce_sum reduce_sum_1", [1, 1, 2]),
     ("elementwise", "element_binary element_binary_1", [1, 1, 2]),
     ("elementwise", "element_binary element_binary_2", [1, 1, 2]),
     ("elementwise", "element_binary element_binary_3", [1, 1, 2])],
)  # fmt: skip
def test_the_attribute_strategy_splits_the_new_ops_by_attribute(report, model, op, degrees):
    """The "attribute" strategy (trained like one device above) splits max, min, divide and
    reduce_sum along a non-sample dim, which the random ones need not."""
    assert report["attribute_degrees"][model][op] == degrees


@pytest.mark.parametrize(
    "layer",
    ["pow", "reduce_sum", "reduce_sum_keepdims", "divide", "multiply_broadcast", "max", "min",
     "exp", "sin", "cos", "rsqrt", "identity", "scalar_multiply", "scalar_add", "scalar_sub", "scalar_true_divide"],
)  # fmt: skip
def test_flexflows_op_script_flow_reads_numpys_values(report, layer):
    result = report["flexflow_ops"][layer]
    assert result["shape"] == result["want_shape"]
    assert result["max_error"] <= 1.0


def test_bad_arguments_from_a_flexflow_script_name_the_layer(report):
    said = report["refusals"]
    assert said["pow"].startswith("ShapeError: pow 'pow_layer' (input (8, 5, 10, 10)): exponent")
    assert "reduce_sum 'reduce_sum_layer': axis 4 is out of range" in said["reduce_sum"]
    assert (
        "(divide): inputs must have the same rank, got (8, 5, 10, 10) (rank 4) and (8, 5) "
        "(rank 2)" in said["divide"]
    )
