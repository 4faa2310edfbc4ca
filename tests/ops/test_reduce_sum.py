"""ReduceSum: shapes, SOAP dims (those of mean), FLOPs, values, gradients, regions and errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, DimKind, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.mean import Mean
from flexflow.ops.reduce_sum import ReduceSum

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs

CONFIGS = [((1,), False), ((-1,), True), ((2, 3), False), ((2, 3), True), ((3, 1), False),
           ((1, 2, 3), True)]  # fmt: skip


def test_registered_as_its_own_kind_not_a_mean():
    assert OP_KINDS["reduce_sum"] is ReduceSum and not isinstance(ReduceSum((1,)), Mean)


@pytest.mark.parametrize("dims, keepdims", CONFIGS)
def test_shapes_and_dims_are_means(dims, keepdims):
    x = [TensorSpec((8, 4, 5, 6))]
    assert ReduceSum(dims, keepdims).infer("s", x).dims == Mean(dims, keepdims).infer("s", x).dims
    assert (
        ReduceSum(dims, keepdims).infer("s", x).output_shape
        == Mean(dims, keepdims).infer("s", x).output_shape
    )


def test_flexflows_example_shape():
    sig = ReduceSum((1, 2)).infer("reduce_sum_layer", [TensorSpec((64, 5, 10, 10))])
    assert sig.output_shape == (64, 10)
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("width", DimKind.ATTRIBUTE),  # the input's name for the dim kept
    ]


def test_flops_and_tile_bytes():
    op = ReduceSum((2, 3))
    sig = op.infer("s", [TensorSpec((8, 16, 5, 5))])
    assert op.flops(sig, full_region((8, 16))) == (8 * 16 * 25, 0.0)
    assert op.tile_cost(sig, ((0, 4), (8, 16))).forward_bytes_read == 4 * 4 * 8 * 25


@pytest.mark.parametrize("dims, keepdims", CONFIGS)
def test_forward_matches_numpy(dims, keepdims):
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5))
    (y,) = ReduceSum(dims, keepdims).forward([x], [])
    axes = tuple(d % 4 for d in dims)
    np.testing.assert_allclose(y, np.sum(x, axis=axes, keepdims=keepdims), rtol=1e-12)


@pytest.mark.parametrize("dims, keepdims", CONFIGS)
def test_gradients(dims, keepdims):
    op = ReduceSum(dims, keepdims)
    sig = op.infer("s", [TensorSpec((2, 3, 2, 3))])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(1)), [])


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=2, max_size=4),
    data=st.data(),
    keepdims=st.booleans(),
)
def test_sum_is_mean_times_count(shape, data, keepdims):
    """Forward and backward: reduce_sum == mean * (elements reduced), for any non-sample axes."""
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(1, rank - 1), min_size=1, unique=True))
    x = np.random.default_rng(0).standard_normal(shape)
    count = np.prod([shape[a] for a in axes])
    total, mean = ReduceSum(tuple(axes), keepdims), Mean(tuple(axes), keepdims)
    (s,), (m,) = total.forward([x], []), mean.forward([x], [])
    np.testing.assert_allclose(s, m * count, rtol=1e-12, atol=1e-12)
    dy = np.ones_like(s)
    (ds,), _ = total.backward([x], [], [s], [dy])
    (dm,), _ = mean.backward([x], [], [m], [dy])
    np.testing.assert_allclose(ds, dm * count, rtol=1e-12)
    assert ds.flags.writeable  # not a broadcast view: the runtime adds into gradients


@pytest.mark.parametrize("dims, keepdims", CONFIGS)
def test_regions_are_sufficient(dims, keepdims):
    op = ReduceSum(dims, keepdims)
    sig = op.infer("s", [TensorSpec((4, 2, 3, 2))])
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 0


@pytest.mark.parametrize(
    "dims, match",
    [
        ((), r"reduce_sum 's': axes is empty for input \(4, 3, 2\); .* e.g. axes=\(2,\)"),
        ((3,), r"reduce_sum 's': axis 3 is out of range for input shape \(4, 3, 2\) \(rank 3\); "
               r"pass an integer axis from -3 to 2"),
        ((1, 1.5), r"reduce_sum 's': axis 1.5 is out of range"),
        ((0,), r"reduce_sum 's': axes \(0,\) include dimension 0, the sample dimension of input "
               r"\(4, 3, 2\); .* reduce only dimensions 1..2"),
        ((1, -2), r"reduce_sum 's': axes \(1, -2\) name the same dimension twice"),
    ],
)  # fmt: skip
def test_shape_errors(dims, match):
    with pytest.raises(ShapeError, match=match):
        ReduceSum(dims).infer("s", [TensorSpec((4, 3, 2))])
