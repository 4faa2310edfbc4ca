"""Dense: shapes, SOAP dims, FLOPs, gradients, regions and shape errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import ActiMode, DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.dense import Dense

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs, random_weights


def test_shapes_and_dims():
    sig = Dense(10).infer("fc", [TensorSpec((4, 6))])
    assert sig.output_shape == (4, 10)
    assert [w.shape for w in sig.weights] == [(10, 6), (10,)]
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", DimKind.PARAMETER),
    ]


def test_sequence_input_keeps_length_as_attribute():
    sig = Dense(8, use_bias=False).infer("fc", [TensorSpec((2, 5, 3))])
    assert sig.output_shape == (2, 5, 8)
    assert [d.kind for d in sig.dims] == [DimKind.SAMPLE, DimKind.ATTRIBUTE, DimKind.PARAMETER]
    assert len(sig.weights) == 1


def test_flops_of_full_op_and_parameter_split_tile():
    op = Dense(10)
    sig = op.infer("fc", [TensorSpec((4, 6))])
    fwd, bwd = op.flops(sig, full_region((4, 10)))
    assert fwd == 2 * 4 * 6 * 10 + 4 * 10
    assert bwd == 2 * (2 * 4 * 6 * 10) + 4 * 10
    cost = op.tile_cost(sig, ((0, 4), (0, 5)))
    # a channel split reads the whole input and half the kernel and bias
    assert cost.forward_bytes_read == 4 * (4 * 6 + 5 * 6 + 5)
    assert cost.forward_bytes_written == 4 * (4 * 5)


@pytest.mark.parametrize("activation", list(ActiMode))
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_gradients(activation, shape):
    op = Dense(5, activation)
    sig = op.infer("fc", [TensorSpec(shape)])
    rng = np.random.default_rng(1)
    inputs, weights = random_inputs(sig, rng), random_weights(sig, rng)
    assert_gradients(op, inputs, weights)


def test_regions_are_sufficient():
    op = Dense(6)
    sig = op.infer("fc", [TensorSpec((4, 5, 3))])
    rng = np.random.default_rng(0)
    assert (
        assert_regions_sufficient(op, sig, random_inputs(sig, rng), random_weights(sig, rng)) > 10
    )


@pytest.mark.parametrize(
    "inputs, match",
    [
        ([TensorSpec((4,))], r"dense 'fc': input must have rank >= 2"),
        ([TensorSpec((4, 3), DType.INT32)], r"dense 'fc': input must be float32"),
        ([TensorSpec((4, 3)), TensorSpec((4, 3))], r"dense 'fc': expected 1 input"),
    ],
)
def test_shape_errors(inputs, match):
    with pytest.raises(ShapeError, match=match):
        Dense(3).infer("fc", inputs)


def test_non_positive_units():
    with pytest.raises(ShapeError, match=r"dense 'fc': out_dim must be a positive integer, got 0"):
        Dense(0).infer("fc", [TensorSpec((4, 3))])
