"""Stack: shapes, dims, FLOPs, gradients, regions, an index-by-index reference and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.registry import OP_KINDS
from flexflow.ops.stack import Stack

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs


def test_registered():
    assert OP_KINDS["stack"] is Stack


def test_lstm_steps_stack_into_a_sequence():
    sig = Stack().infer("stack1", [TensorSpec((4, 8))] * 5)  # five (sample, hidden) steps
    assert sig.output_shape == (4, 5, 8)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", None),
        ("channel", DimKind.ATTRIBUTE),
    ]


def test_other_axes():
    assert Stack(2).infer("stack1", [TensorSpec((4, 8))] * 3).output_shape == (4, 8, 3)
    assert Stack(-1).infer("stack1", [TensorSpec((4, 8))] * 3).output_shape == (4, 8, 3)
    sig = Stack(2).infer("stack1", [TensorSpec((2, 3, 4))] * 2)
    assert sig.output_shape == (2, 3, 2, 4)
    assert [d.kind for d in sig.dims] == [
        DimKind.SAMPLE,
        DimKind.ATTRIBUTE,
        None,
        DimKind.ATTRIBUTE,
    ]


def test_flops_and_regions():
    op = Stack()
    sig = op.infer("stack1", [TensorSpec((4, 8))] * 3)
    assert op.flops(sig, full_region(sig.output_shape)) == (0.0, 0.0)
    assert op.input_regions(sig, ((2, 4), (0, 3), (4, 8))) == (((2, 4), (4, 8)),) * 3


def test_forward_places_input_t_at_index_t():
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((2, 3)) for _ in range(4)]
    (y,) = Stack().forward(xs, [])
    for t, x in enumerate(xs):
        np.testing.assert_array_equal(y[:, t, :], x)


@pytest.mark.parametrize("shape, count, axis", [((2, 3), 4, 1), ((2, 3, 2), 2, 3), ((3,), 2, 1)])
def test_gradients(shape, count, axis):
    op = Stack(axis)
    sig = op.infer("stack1", [TensorSpec(shape)] * count)
    assert_gradients(op, random_inputs(sig, np.random.default_rng(0)), [])


def test_regions_are_sufficient():
    op = Stack()
    sig = op.infer("stack1", [TensorSpec((4, 6))] * 3)
    assert assert_regions_sufficient(op, sig, random_inputs(sig, np.random.default_rng(0)), []) > 10


@pytest.mark.parametrize(
    "axis, inputs, match",
    [
        (1, [], r"stack 'stack1': expected at least 1 input tensor, got 0"),
        (
            1,
            [TensorSpec((4, 3)), TensorSpec((4, 2))],
            r"stack 'stack1': inputs must have one shape and dtype, "
            r"got shapes \(\(4, 3\), \(4, 2\)\)",
        ),
        (
            1,
            [TensorSpec((4, 3)), TensorSpec((4, 3), DType.INT32)],
            r"stack 'stack1': inputs must have one shape and dtype, .*\('float32', 'int32'\)",
        ),
        (1, [TensorSpec(())], r"stack 'stack1': inputs must have rank >= 1"),
        (0, [TensorSpec((4, 3))], r"stack 'stack1': cannot stack along axis 0, the sample"),
        (-3, [TensorSpec((4, 3))], r"stack 'stack1': cannot stack along axis -3, the sample"),
        (-4, [TensorSpec((4, 3))], r"stack 'stack1': axis -4 is out of range"),
        (
            3,
            [TensorSpec((4, 3))],
            r"stack 'stack1': axis 3 is out of range for the rank-3 output "
            r"\(inputs of shape \(4, 3\)",
        ),
    ],
)
def test_shape_errors(axis, inputs, match):
    with pytest.raises(ShapeError, match=match):
        Stack(axis).infer("stack1", inputs)
