"""Any valid strategy trains to the same numbers as one device, and one device matches numpy (Legate, 2 CPUs)."""

from __future__ import annotations

import pytest

from tests.runtime.scripts import run_legate_script

STRATEGIES = 20
MODELS = [
    "mlp", "cnn", "lstm", "residual", "classifier", "tagger", "relu_classifier", "translator",
    "self_attention", "encoder",
]  # fmt: skip


@pytest.fixture(scope="module", params=[2, 4], ids=["2cpus", "4cpus"])
def report(request) -> dict:
    return run_legate_script("numerics_script.py", str(STRATEGIES), cpus=request.param, timeout=900)


@pytest.mark.legate
@pytest.mark.parametrize("model", MODELS)
def test_one_device_matches_the_numpy_reference(report, model):
    assert report[model]["single_vs_numpy_loss"] <= 1.0
    assert report[model]["single_vs_numpy_weights"] <= 1.0


@pytest.mark.legate
@pytest.mark.parametrize("model", MODELS)
def test_every_strategy_trains_like_one_device(report, model):
    strategies = report[model]["strategies"]
    # one device, data parallel, mixed, random ones, and the model's own (`run`'s more)
    assert len(strategies) == 3 + STRATEGIES + len(report[model]["added_strategies"])
    assert model != "cnn" or len(report[model]["added_strategies"]) >= 2  # pools split
    failing = {name: r for name, r in strategies.items() if r["loss"] > 1.0 or r["weights"] > 1.0}
    assert failing == {}
    # the random strategies really split ops in several dimensions
    assert len(report[model]["splits"]) >= 3


@pytest.mark.legate
@pytest.mark.parametrize("model", MODELS)
def test_the_launch_count_predicts_the_tasks_each_step_issues(report, model):
    """`flexflow.launches` (what the simulator charges the runtime's per-task cost on) counts
    the Legate tasks the Executor creates in every training step, under every strategy."""
    counts = report[model]["task_counts"]
    wrong = {name: c for name, c in counts.items() if set(c[0]) != {c[1]}}
    assert wrong == {}
    assert len({c[1] for c in counts.values()}) >= 3  # strategies that issue different counts


@pytest.mark.legate
@pytest.mark.parametrize("model", MODELS)
def test_tasks_read_partial_gradients_one_device_row_at_a_time(report, model):
    """Update and step tasks name every contributing device's partial gradients as separate
    arguments, never the whole store the devices wrote by rows (Legion's analysis of such a read
    cost about 2 ms per data-parallel step on this project's host)."""
    assert report[model]["whole_partial_gradient_reads"] == dict.fromkeys(
        report[model]["task_counts"], 0
    )


@pytest.mark.legate
def test_batch_norm_is_split_by_sample_in_some_strategies(report):
    """The CNN's batch norm normalizes with statistics shared across its sample tiles."""
    assert report["cnn"]["statistics_splits"] >= 2


@pytest.mark.legate
def test_batch_norm_runs_inside_fused_tasks_where_it_can(report):
    """On one CPU the batch norms join their fused tasks with their own statistics
    (flexflow.fusion.shared_statistics). Under data parallelism their group runs as
    concurrent launches whose points exchange the statistics (flexflow.runtime.concurrent):
    the CNN's (whose input feeds two branches) and the residual model's whole step is one
    launch; with their first op on one device ("mixed") they have several groups, so the
    exchanging group also runs a backward launch of its own. The equality tests above cover
    them all (test_modes.py a batch norm left alone). Each entry: batch norms with their own
    statistics, exchanging ones, groups, exchanging groups."""
    for model in ("cnn", "residual"):
        assert report[model]["own_statistics"]["single"][:2] == [1, 0]
        assert report[model]["own_statistics"]["dp"] == [0, 1, 1, 1]
        own, exchanging, groups, exchanging_groups = report[model]["own_statistics"]["mixed"]
        assert (own, exchanging, exchanging_groups) == (0, 1, 1) and groups > 1


@pytest.mark.legate
def test_data_parallel_and_one_device_steps_of_dense_and_recurrent_models_run_as_one_c_call(
    report,
):
    """The models the equality tests above cover with their steps in C (flexflow.runtime
    .native_step): the relu and tanh classifiers, the tagger (an embedding, unrolled LSTM
    steps reading its time steps, a dense layer on the stacked states), the translator (two
    inputs, attention), self-attention with a residual add and the transformer encoder (layer
    norms, GELU, a split): one program per step task; the CNN, whose batch norm reads running
    statistics, keeps none."""
    from flexflow.ops import blas

    if blas.sgemm_address() is None:
        pytest.skip("MKL is not installed: no native steps")
    for model in (
        "relu_classifier",
        "classifier",
        "tagger",
        "translator",
        "self_attention",
        "encoder",
    ):
        native = report[model]["native_steps"]
        assert native["single"] == 1 and native["dp"] >= 2, model
    assert set(report["cnn"]["native_steps"].values()) == {0}
