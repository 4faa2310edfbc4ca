"""FlexFlow's element-wise and reduce_sum layers through the layer API: the ops they add, their
shapes, and errors naming the layer, the shape and the fix (the ops: tests/ops)."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.errors import GraphError, ShapeError
from flexflow.flexflow_layers import NOT_OFFERED_LAYERS
from flexflow.ops.element_binary import BinaryOp, ElementBinary
from flexflow.ops.element_unary import ElementUnary
from flexflow.ops.reduce_sum import ReduceSum
from flexflow.ops.unary_functions import UnaryFunction

F = UnaryFunction
OFFERED = ("exp", "sin", "cos", "pow", "rsqrt", "identity", "scalar_multiply", "scalar_add",
           "scalar_sub", "scalar_true_divide", "divide", "max", "min", "reduce_sum")  # fmt: skip


def _model():
    model = FFModel(FFConfig(batch_size=4))
    return model, model.create_tensor((4, 5, 6), name="x"), model.create_tensor((4, 5, 6), name="y")


@pytest.mark.parametrize("method", ["add", "subtract", "multiply", "divide", "max", "min"])
def test_binary_layers_broadcast_dimensions_of_size_1(method):
    """As FlexFlow's FFModel.binary: one rank, each dimension equal or 1 in one input."""
    model = FFModel(FFConfig(batch_size=4))
    x = model.create_tensor((4, 5, 1), name="x")
    y = model.create_tensor((4, 1, 6), name="y")
    out = getattr(model, method)(x, y, name="b")
    node = model.graph().ops[-1]
    assert out.shape == (4, 5, 6) and node.op == ElementBinary(BinaryOp(method))
    assert node.sig.inputs[0].shape == (4, 5, 1) and node.sig.inputs[1].shape == (4, 1, 6)


def test_the_layers_flexflow_offers_are_no_longer_refused():
    assert not set(OFFERED) & NOT_OFFERED_LAYERS
    assert {"argmax", "rms_norm"} <= NOT_OFFERED_LAYERS and "gather" not in NOT_OFFERED_LAYERS


@pytest.mark.parametrize(
    "build, op",
    [
        (lambda m, x, y: m.exp(x), ElementUnary(function=F.EXP)),
        (lambda m, x, y: m.sin(x), ElementUnary(function=F.SIN)),
        (lambda m, x, y: m.cos(x), ElementUnary(function=F.COS)),
        (lambda m, x, y: m.pow(x, 2), ElementUnary(function=F.POW, scalar=2.0)),
        (lambda m, x, y: m.rsqrt(x), ElementUnary(function=F.RSQRT)),
        (lambda m, x, y: m.identity(x), ElementUnary(ActiMode.AC_MODE_NONE)),
        (lambda m, x, y: m.scalar_multiply(x, 3.0), ElementUnary(function=F.SCALAR_MULTIPLY, scalar=3.0)),
        (lambda m, x, y: m.scalar_add(x, np.float32(0.5), True), ElementUnary(function=F.SCALAR_ADD, scalar=0.5)),
        (lambda m, x, y: m.scalar_sub(x, -1, inplace=False), ElementUnary(function=F.SCALAR_SUB, scalar=-1.0)),
        (lambda m, x, y: m.scalar_true_divide(x, 4.0), ElementUnary(function=F.SCALAR_TRUE_DIVIDE, scalar=4.0)),
        (lambda m, x, y: m.divide(x, y), ElementBinary(BinaryOp.DIVIDE)),
        (lambda m, x, y: m.max(x, y, False), ElementBinary(BinaryOp.MAX)),
        (lambda m, x, y: m.min(x, y), ElementBinary(BinaryOp.MIN)),
    ],
)  # fmt: skip
def test_each_layer_adds_its_op_with_the_inputs_shape(build, op):
    model, x, y = _model()
    out = build(model, x, y)
    node = model.graph().ops[-1]
    assert node.op == op and out.shape == (4, 5, 6)
    assert type(node.op.scalar) is float if getattr(node.op, "scalar", None) is not None else True


@pytest.mark.parametrize(
    "axes, keepdims, shape", [([1, 2], False, (4,)), ([2], True, (4, 5, 1)), (-1, False, (4, 5))]
)
def test_reduce_sum_takes_flexflows_axes_and_keepdims(axes, keepdims, shape):
    model, x, _ = _model()
    out = model.reduce_sum(x, axes=axes, keepdims=keepdims, name="total")
    node = model.graph().ops[-1]
    assert isinstance(node.op, ReduceSum) and node.name == "total" and out.shape == shape


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda m, x, y: m.divide(x, m.create_tensor((4, 5), name="z"), name="d"),
         r"element_binary 'd' \(divide\): inputs must have the same rank, got \(4, 5, 6\) "
         r"\(rank 3\) and \(4, 5\) \(rank 2\); broadcasting \(as FlexFlow's\) repeats dimensions "
         r"of size 1 of operands of one rank: reshape one input to the other's rank"),
        (lambda m, x, y: m.max(x, m.create_tensor((4, 6, 5), name="z"), name="m"),
         r"element_binary 'm' \(max\): inputs \(4, 5, 6\) and \(4, 6, 5\) cannot be broadcast: "
         r"dimension 1 is 5 in one and 6 in the other"),
        (lambda m, x, y: m.min(x, m.create_tensor((4, 5, 6, 1), name="z"), name="m"),
         r"element_binary 'm' \(min\): inputs must have the same rank"),
        (lambda m, x, y: m.add(x, m.create_tensor((1, 5, 6), name="z"), name="a"),
         r"element_binary 'a' \(add\): inputs must have the same sample dimension \(0\), got "
         r"\(4, 5, 6\) and \(1, 5, 6\); the sample dimension is never broadcast"),
        (lambda m, x, y: m.reduce_sum(x, [3], name="s"),
         r"reduce_sum 's': axis 3 is out of range for input shape \(4, 5, 6\) \(rank 3\); pass "
         r"an integer axis from -3 to 2"),
        (lambda m, x, y: m.reduce_sum(x, [0, 1], name="s"),
         r"reduce_sum 's': axes \(0, 1\) include dimension 0, the sample dimension"),
        (lambda m, x, y: m.reduce_sum(x, "12", name="s"),
         r"reduce_sum 's': the dimensions to reduce must be a list of integers, got '12'"),
        (lambda m, x, y: m.reduce_sum(x, [1], "yes", name="s"),
         r"reduce_sum 's': keepdims must be True or False, got 'yes' \(input \(4, 5, 6\)\)"),
        (lambda m, x, y: m.reduce_sum(x, (1, [2]), name="s"),
         r"reduce_sum 's': the dimensions to reduce must be a list of integers, got \(1, \[2\]\)"),
        (lambda m, x, y: m.mean(m.create_tensor((4,), name="v"), [], name="s"),
         r"mean 's': input \(4,\) has no dimension but the sample's"),
        (lambda m, x, y: m.scalar_add(x, 10**400, name="s"),
         r"scalar_add 's' .*: scalar must be a finite number, got 1000000000000000000000000000000000000\.\.\.;"),
        (lambda m, x, y: m.pow(x, "2", name="p"),
         r"pow 'p' \(input \(4, 5, 6\)\): exponent must be a finite number, got '2'; pass a float "
         r"such as 2.0"),
        (lambda m, x, y: m.pow(x, [2.0], name="p"), r"pow 'p' .*: exponent must be a finite number"),
        (lambda m, x, y: m.scalar_multiply(x, None, name="s"),
         r"scalar_multiply 's' .*: scalar must be a finite number, got None"),
        (lambda m, x, y: m.scalar_add(x, float("nan"), name="s"),
         r"scalar_add 's' .*: scalar must be a finite number, got nan"),
        (lambda m, x, y: m.scalar_true_divide(x, 0, name="s"),
         r"scalar_true_divide 's' .*: divides by scalar 0"),
        (lambda m, x, y: m.scalar_sub(x, 1.0, "s"), r"scalar_sub: inplace='s' .* name='s'"),
        (lambda m, x, y: m.exp(x, x), r"element_unary: layer name must be a non-empty string"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_naming_the_layer_and_leaves_the_model_as_it_was(build, message):
    model, x, y = _model()
    error = GraphError if "layer name" in message else ShapeError
    with pytest.raises(error, match=message):
        build(model, x, y)
    assert model.graph().ops == ()
    model.identity(x, name="s")  # the name is free again


def test_a_small_model_of_the_new_layers_computes_what_numpy_does():
    """The graph's ops, run by their numpy kernels in order, compute the composition."""
    model, x, y = _model()
    a = model.scalar_add(model.pow(model.sin(x), 2.0), 1.0)  # sin^2 + 1 > 0
    b = model.max(model.rsqrt(a), model.cos(y))
    c = model.divide(model.exp(model.scalar_multiply(b, 0.5)), model.scalar_sub(a, -1.0))
    model.reduce_sum(model.min(c, model.identity(b)), axes=[1], keepdims=True)
    rng = np.random.default_rng(0)
    values = {0: rng.standard_normal((4, 5, 6)), 1: rng.standard_normal((4, 5, 6))}
    graph = model.graph()
    for node in graph.ops:
        outs = node.op.forward([values[i] for i in node.inputs], [])
        values.update(zip(node.outputs, outs, strict=True))
    xv, yv = values[0], values[1]
    av = np.sin(xv) ** 2 + 1
    bv = np.maximum(1 / np.sqrt(av), np.cos(yv))
    cv = np.exp(0.5 * bv) / (av + 1)
    expected = np.minimum(cv, bv).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(values[graph.ops[-1].outputs[0]], expected, rtol=1e-12)


def test_a_graph_of_the_new_layers_is_priced_and_simulated_under_any_strategy():
    from flexflow.cost import CostModel
    from flexflow.machine import parse_machine
    from flexflow.ops.base import full_region
    from flexflow.simulator import DeltaSimulator, SimContext, TaskGraph, full_simulate
    from flexflow.space import enumerate_configs
    from flexflow.strategies import named_strategy

    model = FFModel(FFConfig(batch_size=64))
    x = model.create_tensor((64, 16, 32), name="x")
    h = model.dense(x, 32)
    a = model.exp(model.scalar_multiply(h, 0.1), name="e")
    b = model.scalar_add(h, 1.0, name="s")
    t = model.reduce_sum(model.divide(model.max(a, b), model.min(a, b)), [1], name="r")
    model.dense(model.pow(t, 2.0), 8)
    graph, machine, costs = model.graph(), parse_machine("p100:4"), CostModel()
    gpu = machine.device(0)
    priced = {
        n: costs.task_time(graph.op(n), full_region(graph.op(n).sig.output_shape), gpu)
        for n in ("e", "s", "r")
    }
    assert all(t.forward_s > 0 and t.backward_s > 0 for t in priced.values())
    context = SimContext(graph, machine, costs)
    for name in ("dp", "model", "random"):
        strategy = named_strategy(name, graph, machine, seed=1)
        delta = DeltaSimulator(TaskGraph(context, strategy))
        assert delta.iteration_s == full_simulate(TaskGraph(context, strategy)).iteration_s > 0
        op = [n.name for n in graph.ops].index("r")
        space = enumerate_configs(graph.ops[op].sig, machine)
        delta.change(op, space[-1])  # reduce_sum split another way: delta == full still
        fresh = TaskGraph(context, strategy.replace(op, space[-1]))
        assert delta.iteration_s == full_simulate(fresh).iteration_s
