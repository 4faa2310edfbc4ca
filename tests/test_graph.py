"""Operator graph: JSON round trip and its errors, DOT and PNG rendering."""

from __future__ import annotations

import json

import numpy as np
import pytest

from flexflow import FFModel
from flexflow.errors import GraphError, ShapeError
from flexflow.graph import OperatorGraph, Parameter, op_attributes
from flexflow.regularizers import L2
from flexflow.render import render_png, to_dot
from flexflow.zoo import load_model


def small_graph() -> OperatorGraph:
    model = FFModel()
    x = model.create_tensor((2, 3, 8, 8), name="image")
    a = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, name="left")
    b = model.conv2d(x, 4, 1, 1, 1, 1, 0, 0, name="right")
    t = model.concat([a, b], axis=1, name="cat")
    model.dense(model.flat(t, name="flat"), 10, name="fc")
    return model.graph()


def test_json_round_trip_is_exact():
    graph = small_graph()
    again = OperatorGraph.from_json(json.loads(graph.dumps()))
    assert again.ops == graph.ops
    assert again.tensors == graph.tensors
    assert again.parameters == graph.parameters


def test_a_kernels_l2_regularizer_lives_on_its_parameter_not_on_the_op():
    """The lambda travels in the graph file with its parameter; the dense op's attributes
    (measured profiles' keys) and the file of an unregularized model stay as they were."""
    plain, regularized = FFModel(), FFModel()
    for model, regularizer in ((plain, None), (regularized, L2(0.001))):
        x = model.create_tensor((2, 6), name="x")
        model.dense(x, 4, kernel_regularizer=regularizer, name="fc")
    graph = regularized.graph()
    assert [(p.name, p.l2) for p in graph.parameters] == [("fc.kernel", 0.001), ("fc.bias", 0.0)]
    assert op_attributes(graph.ops[0].op) == op_attributes(plain.graph().ops[0].op)
    assert graph.ops[0].op == plain.graph().ops[0].op
    data = graph.to_json()
    assert data["parameters"][0]["l2"] == 0.001 and "l2" not in data["parameters"][1]
    assert all("l2" not in p for p in plain.graph().to_json()["parameters"])
    assert OperatorGraph.from_json(json.loads(graph.dumps())).parameters == graph.parameters
    for bad in (-1.0, 1e39, "0.1", True, None):
        data["parameters"][0]["l2"] = bad
        with pytest.raises(GraphError, match=r"parameter 'fc.kernel': its L2 lambda must be a "
                           r"number >= 0 that float32 holds .*fix its \"l2\" in a graph file"):  # fmt: skip
            OperatorGraph.from_json(data)
    # a numpy scalar is kept as a Python float, which the file can hold
    kernel = graph.parameters[0]
    again = Parameter(kernel.id, kernel.name, kernel.spec, np.float32(0.5))
    assert type(again.l2) is float and json.dumps(again.l2) == "0.5"


def test_round_trip_keeps_shared_lstm_weights():
    graph = load_model("rnnlm", seq_length=3).graph()
    again = OperatorGraph.from_json(graph.to_json())
    assert again.num_parameters == graph.num_parameters
    assert [op.weights for op in again.ops] == [op.weights for op in graph.ops]
    assert [op.layer for op in again.ops] == [op.layer for op in graph.ops]


@pytest.mark.parametrize(
    "mutate, error, match",
    [
        (lambda d: {**d, "format": "x"}, GraphError, r"not an operator graph file"),
        (lambda d: {**d, "version": 7}, GraphError, r"version 7 is not supported"),
        (
            lambda d: {k: v for k, v in d.items() if k != "ops"},
            GraphError,
            r"malformed operator graph file",
        ),
        (lambda d: _op(d, "cat", kind="warp"), GraphError, r"unknown op kind 'warp'"),
        (lambda d: _op(d, "cat", inputs=[99]), GraphError, r"op 'cat' reads tensor 99"),
        (
            lambda d: _op(d, "fc", attributes={"out_dim": 0}),
            ShapeError,
            r"dense 'fc': out_dim must be a positive integer",
        ),
    ],
)
def test_bad_graph_files(mutate, error, match):
    data = json.loads(small_graph().dumps())
    with pytest.raises(error, match=match):
        OperatorGraph.from_json(mutate(data))


def _op(data, name, **fields):
    for entry in data["ops"]:
        if entry["name"] == name:
            entry.update(fields)
    return data


def test_dot_has_every_op_and_edge():
    dot = to_dot(small_graph())
    assert dot.startswith("digraph operator_graph {")
    for name in ("left", "right", "cat", "flat", "fc"):
        assert f'"{name}\\n' in dot
    assert (
        dot.count("->") == 6
    )  # image->left, image->right, left->cat, right->cat, cat->flat, flat->fc


def test_png_is_written_atomically(tmp_path):
    path = render_png(small_graph(), tmp_path / "g.png", title="small")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["g.png"]


def test_dot_labels_quote_the_names_a_user_gave():
    model = FFModel()
    x = model.create_tensor((2, 4), name='in "q"')
    model.dense(x, 3, name="fc\\1")
    dot = to_dot(model.graph())
    assert 'label="in \\"q\\"\\n2×4"' in dot and 'label="fc\\\\1\\n' in dot


def test_exported_files_get_the_usual_permissions(tmp_path):
    import os

    from flexflow.fileio import atomic_write_text

    path = atomic_write_text(tmp_path / "x.json", "{}")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
