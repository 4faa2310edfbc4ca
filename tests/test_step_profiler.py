"""flexflow.step_profiler: each op's time inside the C step of a whole-model sample split."""

from __future__ import annotations

import pytest

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.cost import cost_key
from flexflow.ops import blas
from flexflow.ops.base import region_shape
from flexflow.step_profiler import measure_native, native_steps, sample_degrees
from flexflow.strategies import data_parallel_over

pytestmark = pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")


def cnn(batch: int = 8, transpose: bool = False):
    model = FFModel(FFConfig(batch_size=batch))
    x = model.create_tensor((batch, 2, 6, 6), name="x")
    x = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
    x = model.batch_norm(x)
    x = model.flat(x)
    if transpose:  # no C kernel in a step: the step runs op by op
        x = model.reshape(
            model.transpose(model.reshape(x, (batch, 4, 36)), (0, 2, 1)), (batch, 144)
        )
    model.softmax(model.dense(x, 5))
    return model.graph()


def test_the_degrees_split_every_op_evenly():
    assert sample_degrees(cnn(batch=12), 4) == [1, 2, 3, 4]
    assert sample_degrees(cnn(batch=8), 4) == [1, 2, 4]
    split = data_parallel_over(cnn(), 2)
    assert all(c.degrees[0] == 2 and set(c.degrees[1:]) == {1} for c in split.configs)
    assert all(c.devices == (0, 1) for c in split.configs)


@pytest.mark.parametrize("degree", [1, 2])
def test_every_op_is_timed_inside_the_c_step(degree):
    graph = cnn()
    found = measure_native(graph, degree, "cpu", repeats=2)
    split = data_parallel_over(graph, degree)
    keys = [
        cost_key(
            node,
            region_shape(config.task_regions(node.sig.output_shape)[0]),
            "cpu",
            graph.computes_input_grads(node.id),
        )
        for node, config in zip(graph.ops, split.configs, strict=True)
    ]
    assert set(found) == set(keys)
    conv, norm, flat, dense, softmax = (found[key] for key in keys)
    for time in (conv, norm, dense):  # kernels: some time each way
        assert time.forward_s > 0 and time.backward_s > 0
    assert flat.forward_s >= 0 and flat.backward_s >= 0  # a view of its input
    assert softmax.backward_s > 0  # the loss starts the backward


def test_a_step_that_runs_op_by_op_has_no_c_step_times():
    graph = cnn(transpose=True)
    assert native_steps(graph, 2) is None
    assert measure_native(graph, 2, "cpu") == {}


def test_a_step_too_big_for_this_host_is_not_measured(monkeypatch):
    from flexflow import step_profiler

    graph = cnn()
    assert step_profiler.step_bytes(graph, 2) > step_profiler.step_bytes(graph, 1) > 0
    memory = 4 * step_profiler.step_bytes(graph, 1)  # a quarter of it: one CPU's steps
    monkeypatch.setattr(step_profiler, "host_memory_bytes", lambda: memory)
    assert measure_native(graph, 1, "cpu")
    assert measure_native(graph, 2, "cpu") == {}
