"""ElementBinary: shapes, SOAP dims, FLOPs, gradients, regions and shape errors, broadcasting."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import ShapeError
from flexflow.ops import DimKind, DType, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.element_binary import BinaryOp, ElementBinary

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs

REFERENCE = {
    BinaryOp.ADD: lambda x, y: x + y,
    BinaryOp.SUBTRACT: lambda x, y: x - y,
    BinaryOp.MULTIPLY: lambda x, y: x * y,
    BinaryOp.DIVIDE: lambda x, y: x / y,
    BinaryOp.MAX: lambda x, y: np.where(x > y, x, y),
    BinaryOp.MIN: lambda x, y: np.where(x < y, x, y),
}


def test_shapes_and_dims():
    sig = ElementBinary(BinaryOp.ADD).infer("add", [TensorSpec((4, 3, 5))] * 2)
    assert sig.output_shape == (4, 3, 5)
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("length", DimKind.ATTRIBUTE),
        ("channel", DimKind.ATTRIBUTE),
    ]


def test_rank_one_is_just_samples():
    sig = ElementBinary(BinaryOp.MULTIPLY).infer("mul", [TensorSpec((7,))] * 2)
    assert [(d.name, d.kind) for d in sig.dims] == [("sample", DimKind.SAMPLE)]


@pytest.mark.parametrize(
    "op_type, backward_per_element",
    [(BinaryOp.ADD, 0), (BinaryOp.SUBTRACT, 1), (BinaryOp.MULTIPLY, 2), (BinaryOp.DIVIDE, 4),
     (BinaryOp.MAX, 2), (BinaryOp.MIN, 2)],
)  # fmt: skip
def test_flops(op_type, backward_per_element):
    op = ElementBinary(op_type)
    sig = op.infer("e", [TensorSpec((4, 6))] * 2)
    assert op.flops(sig, full_region((4, 6))) == (24, backward_per_element * 24)
    assert op.flops(sig, ((0, 2), (3, 6))) == (6, backward_per_element * 6)
    cost = op.tile_cost(sig, ((0, 2), (0, 6)))
    assert cost.forward_bytes_read == 4 * 2 * 12
    assert cost.forward_bytes_written == 4 * 12


@pytest.mark.parametrize("op_type", list(BinaryOp))
@pytest.mark.parametrize("shape", [(3,), (3, 4), (2, 3, 2)])
def test_gradients(op_type, shape):
    op = ElementBinary(op_type)
    sig = op.infer("e", [TensorSpec(shape)] * 2)
    x, y = random_inputs(sig, np.random.default_rng(1))
    if op_type is BinaryOp.DIVIDE:  # away from y = 0, where finite differences break down
        y = np.where(y < 0, y - 0.5, y + 0.5)
    assert_gradients(op, [x, y], [])


@pytest.mark.parametrize("op_type, first", [(BinaryOp.MAX, np.greater_equal),
                                            (BinaryOp.MIN, np.less_equal)])  # fmt: skip
def test_max_and_min_send_the_gradient_to_the_chosen_input_ties_to_x(op_type, first):
    x = np.array([[1.0, 2.0, 3.0, -1.0]])
    y = np.array([[2.0, 2.0, 1.0, -1.0]])  # x below, tied, above, tied
    dz = np.array([[10.0, 20.0, 30.0, 40.0]])
    (z,) = ElementBinary(op_type).forward([x, y], [])
    (dx, dy), _ = ElementBinary(op_type).backward([x, y], [], [z], [dz])
    np.testing.assert_array_equal(dx, np.where(first(x, y), dz, 0.0))
    np.testing.assert_array_equal(dy, np.where(first(x, y), 0.0, dz))
    np.testing.assert_array_equal(dx + dy, dz)  # a tie counts dz once (FlexFlow's: twice)


@settings(max_examples=50, deadline=None)
@given(
    op_type=st.sampled_from([BinaryOp.MAX, BinaryOp.MIN]),
    pairs=st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), min_size=1, max_size=8),
)
def test_max_and_min_gradients_sum_to_dz_and_follow_the_output(op_type, pairs):
    """Small integers tie often: every element's dz goes to exactly one input, one whose value
    is the output's."""
    x = np.array([[float(a) for a, _ in pairs]])
    y = np.array([[float(b) for _, b in pairs]])
    dz = np.arange(1.0, x.size + 1).reshape(x.shape)
    (z,) = ElementBinary(op_type).forward([x, y], [])
    (dx, dy), _ = ElementBinary(op_type).backward([x, y], [], [z], [dz])
    np.testing.assert_array_equal(dx + dy, dz)
    assert np.all(np.where(dx != 0, x, y) == z)


@pytest.mark.parametrize("op_type", [BinaryOp.MAX, BinaryOp.MIN])
def test_max_and_min_send_the_gradient_to_the_nan_they_output(op_type):
    """numpy's maximum and minimum output a NaN of either input; the gradient goes to it."""
    x = np.array([[np.nan, 1.0, np.nan, 2.0]])
    y = np.array([[1.0, np.nan, np.nan, 1.0]])
    dz = np.array([[10.0, 20.0, 30.0, 40.0]])
    (z,) = ElementBinary(op_type).forward([x, y], [])
    (dx, dy), _ = ElementBinary(op_type).backward([x, y], [], [z], [dz])
    assert np.isnan(z[0, :3]).all()
    np.testing.assert_array_equal(dx[0, :3], [10.0, 0.0, 30.0])  # x's NaN; y's; both: x's
    np.testing.assert_array_equal(dy[0, :3], [0.0, 20.0, 0.0])
    np.testing.assert_array_equal(dx + dy, dz)


def test_divide_by_zero_is_inf_as_flexflows_without_a_warning():
    op = ElementBinary(BinaryOp.DIVIDE)
    x, y = np.array([[1.0, 0.0]]), np.zeros((1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # data, not an error: no RuntimeWarning either
        (z,) = op.forward([x, y], [])
        (dx, dy), _ = op.backward([x, y], [], [z], [np.ones((1, 2))])
    assert np.isinf(z[0, 0]) and np.isnan(z[0, 1])
    assert np.isinf(dx).all()


@pytest.mark.parametrize("op_type", list(BinaryOp))
def test_forward_matches_numpy(op_type):
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 4, 5))
    (z,) = ElementBinary(op_type).forward([x, y], [])
    np.testing.assert_array_equal(z, REFERENCE[op_type](x, y))


def test_add_gradients_do_not_alias():
    dz = np.ones((2, 3))
    (dx, dy), _ = ElementBinary(BinaryOp.ADD).backward([dz, dz], [], [dz], [dz])
    assert dx is not dy and dx is not dz


@pytest.mark.parametrize("op_type", list(BinaryOp))
def test_regions_are_sufficient(op_type):
    op = ElementBinary(op_type)
    sig = op.infer("e", [TensorSpec((4, 2, 3))] * 2)
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 10


@pytest.mark.parametrize(
    "inputs, match",
    [
        ([TensorSpec((4, 3))], r"element_binary 'e': expected 2 input"),
        (
            [TensorSpec((4, 3)), TensorSpec((4, 3, 1))],
            r"element_binary 'e' \(add\): inputs must have the same rank, got \(4, 3\) \(rank 2\) "
            r"and \(4, 3, 1\) \(rank 3\); broadcasting \(as FlexFlow's\) repeats dimensions of "
            r"size 1 of operands of one rank: reshape one input to the other's rank",
        ),
        (
            [TensorSpec((4, 3, 2)), TensorSpec((4, 3, 5))],
            r"element_binary 'e' \(add\): inputs \(4, 3, 2\) and \(4, 3, 5\) cannot be broadcast: "
            r"dimension 2 is 2 in one and 5 in the other; each dimension must be equal in both "
            r"or 1 in one of them",
        ),
        (
            [TensorSpec((4, 3)), TensorSpec((1, 3))],
            r"element_binary 'e' \(add\): inputs must have the same sample dimension \(0\), got "
            r"\(4, 3\) and \(1, 3\); the sample dimension is never broadcast",
        ),
        (
            [TensorSpec((4, 3), DType.INT32), TensorSpec((4, 3))],
            r"'e': first input must be float32",
        ),
        (
            [TensorSpec((4, 3)), TensorSpec((4, 3), DType.INT64)],
            r"'e': second input must be float32",
        ),
        ([TensorSpec(())] * 2, r"element_binary 'e': inputs must have rank >= 1"),
    ],
)
def test_shape_errors(inputs, match):
    with pytest.raises(ShapeError, match=match):
        ElementBinary(BinaryOp.ADD).infer("e", inputs)


@pytest.mark.parametrize("op_type", [BinaryOp.DIVIDE, BinaryOp.MAX, BinaryOp.MIN])
def test_divide_max_min_name_themselves_in_shape_errors(op_type):
    match = (
        rf"element_binary 'e' \({op_type.value}\): inputs must have the same rank, got "
        r"\(4, 3\) \(rank 2\) and \(4, 3, 1\) \(rank 3\)"
    )
    with pytest.raises(ShapeError, match=match):
        ElementBinary(op_type).infer("e", [TensorSpec((4, 3)), TensorSpec((4, 3, 1))])


# ---- broadcasting -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "x, y, out",
    [((4, 10, 1), (4, 10, 2), (4, 10, 2)),  # FlexFlow's Keras example elementwise_mul_broadcast
     ((4, 10, 2), (4, 10, 1), (4, 10, 2)),
     ((4, 1, 2), (4, 10, 1), (4, 10, 2)),  # both repeated
     ((4, 1), (4, 1), (4, 1)),
     ((4, 3, 1, 5), (4, 1, 6, 5), (4, 3, 6, 5))],
)  # fmt: skip
@pytest.mark.parametrize("op_type", list(BinaryOp))
def test_broadcast_shapes_and_dims(op_type, x, y, out):
    """Each dimension equal or 1 in one input; the output's dims are all partitionable."""
    sig = ElementBinary(op_type).infer("e", [TensorSpec(x), TensorSpec(y)])
    assert sig.output_shape == out
    assert sig.inputs == (TensorSpec(x), TensorSpec(y))
    assert [d.kind for d in sig.dims] == [DimKind.SAMPLE] + [DimKind.ATTRIBUTE] * (len(out) - 1)


def test_broadcast_input_regions_read_the_repeated_row():
    """A tile reads its own range of each dimension an input has whole, [0, 1) of those it is
    repeated along: every tile along a repeated dimension reads the same row."""
    op = ElementBinary(BinaryOp.MULTIPLY)
    sig = op.infer("m", [TensorSpec((4, 10, 1)), TensorSpec((4, 1, 2))])
    assert op.input_regions(sig, ((2, 4), (5, 10), (1, 2))) == (
        ((2, 4), (5, 10), (0, 1)),
        ((2, 4), (0, 1), (1, 2)),
    )
    same = op.infer("m", [TensorSpec((4, 10, 2))] * 2)
    assert op.input_regions(same, ((2, 4), (5, 10), (1, 2))) == (((2, 4), (5, 10), (1, 2)),) * 2


def test_broadcast_flops_and_bytes():
    """Forward: one FLOP per output; backward adds, per repeated input, the sum of the tile's
    gradient into its region. The small input's bytes are its region's."""
    op = ElementBinary(BinaryOp.MULTIPLY)
    sig = op.infer("m", [TensorSpec((4, 10, 1)), TensorSpec((4, 10, 2))])
    region = ((0, 2), (0, 10), (0, 2))  # 40 outputs; x's region (0, 2) (0, 10) (0, 1): 20
    assert op.flops(sig, region) == (40, 2 * 40 + (40 - 20))
    cost = op.tile_cost(sig, region)
    assert cost.forward_bytes_read == 4 * (20 + 40)
    assert cost.backward_bytes_written == 4 * (20 + 40)


@pytest.mark.parametrize("op_type", list(BinaryOp))
def test_broadcast_forward_matches_numpy(op_type):
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((2, 3, 1, 5)), rng.standard_normal((2, 1, 4, 5))
    (z,) = ElementBinary(op_type).forward([x, y], [])
    np.testing.assert_array_equal(z, REFERENCE[op_type](x, y))


@st.composite
def broadcast_pair(draw):
    """Two shapes of one rank (2 to 4) and one sample dimension, each other dimension equal
    or 1 in one of them."""
    rank = draw(st.integers(2, 4))
    x = [draw(st.integers(1, 3))]
    y = list(x)
    for _ in range(rank - 1):
        size = draw(st.integers(2, 3))
        a, b = draw(st.sampled_from([(size, size), (1, size), (size, 1), (1, 1)]))
        x.append(a)
        y.append(b)
    return tuple(x), tuple(y)


@settings(max_examples=30, deadline=None)
@given(op_type=st.sampled_from(list(BinaryOp)), shapes=broadcast_pair(), seed=st.integers(0, 99))
def test_broadcast_gradients_match_finite_differences(op_type, shapes, seed):
    """A repeated input's gradient is the output gradient (through each rule) summed over the
    dimensions it is repeated along, of its own shape."""
    op = ElementBinary(op_type)
    sig = op.infer("e", [TensorSpec(s) for s in shapes])
    x, y = random_inputs(sig, np.random.default_rng(seed))
    if op_type is BinaryOp.DIVIDE:  # away from y = 0, where finite differences break down
        y = np.where(y < 0, y - 0.5, y + 0.5)
    # max and min: normal draws tie (their kink) with probability 0, nor come within the step
    assert_gradients(op, [x, y], [], seed=seed)
    dz = np.random.default_rng(seed).standard_normal(sig.output_shape)
    (dx, dy), _ = op.backward([x, y], [], op.forward([x, y], []), [dz])
    assert dx.shape == shapes[0] and dy.shape == shapes[1]


@pytest.mark.parametrize(
    "op_type, dx, dy",
    [(BinaryOp.ADD, lambda x, y, dz: dz, lambda x, y, dz: dz),
     (BinaryOp.SUBTRACT, lambda x, y, dz: dz, lambda x, y, dz: -dz),
     (BinaryOp.MULTIPLY, lambda x, y, dz: dz * y, lambda x, y, dz: dz * x),
     (BinaryOp.DIVIDE, lambda x, y, dz: dz / y, lambda x, y, dz: -dz * x / y**2)],
)  # fmt: skip
def test_broadcast_gradients_are_the_rules_summed_over_the_repeated_dims(op_type, dx, dy):
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((3, 4, 1)), rng.standard_normal((3, 1, 5)) + 3.0
    dz = rng.standard_normal((3, 4, 5))
    (gx, gy), _ = ElementBinary(op_type).backward([x, y], [], [x + y], [dz])
    np.testing.assert_allclose(gx, dx(x, y, dz).sum(axis=2, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(gy, dy(x, y, dz).sum(axis=1, keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("op_type", [BinaryOp.MAX, BinaryOp.MIN])
def test_broadcast_max_and_min_ties_and_nans_count_dz_once(op_type):
    """Ties go to x, NaN to the input output, element by element of the repeated values; the
    two gradients, summed back over the output, give dz's total once."""
    x = np.array([[[1.0], [np.nan]]])  # (1, 2, 1), repeated along the last dimension
    y = np.array([[[1.0, 2.0, 0.0, np.nan]]])  # (1, 1, 4), repeated along the middle one
    dz = np.arange(1.0, 9.0).reshape(1, 2, 4)
    (z,) = ElementBinary(op_type).forward([x, y], [])
    (dx, dy), _ = ElementBinary(op_type).backward([x, y], [], [z], [dz])
    wide_x, wide_y = np.broadcast_to(x, z.shape), np.broadcast_to(y, z.shape)
    first = (wide_x >= wide_y if op_type is BinaryOp.MAX else wide_x <= wide_y) | np.isnan(wide_x)
    np.testing.assert_array_equal(dx, np.where(first, dz, 0.0).sum(axis=2, keepdims=True))
    np.testing.assert_array_equal(dy, np.where(first, 0.0, dz).sum(axis=1, keepdims=True))
    assert dx.sum() + dy.sum() == dz.sum()


@pytest.mark.parametrize("op_type", list(BinaryOp))
def test_broadcast_regions_are_sufficient(op_type):
    op = ElementBinary(op_type)
    sig = op.infer("e", [TensorSpec((4, 2, 1)), TensorSpec((4, 1, 3))])
    inputs = random_inputs(sig, np.random.default_rng(0))
    assert assert_regions_sufficient(op, sig, inputs, []) > 10
