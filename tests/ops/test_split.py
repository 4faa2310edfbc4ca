"""Split: shapes, dims, FLOPs, gradients, regions of every output, a slicing reference, errors."""

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.ops import OP_KINDS, DimKind, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.split import Split

from .opcheck import assert_gradients, assert_regions_sufficient, random_inputs


def test_registered():
    assert OP_KINDS["split"] is Split


def test_shapes_and_dims():
    op = Split([2, 3, 1], 1)  # a list becomes a tuple, so the op stays hashable
    assert op.sizes == (2, 3, 1) and hash(op) == hash(Split((2, 3, 1), 1))
    sig = op.infer("split1", [TensorSpec((4, 6, 8, 8))])
    assert [o.shape for o in sig.outputs] == [(4, 2, 8, 8), (4, 3, 8, 8), (4, 1, 8, 8)]
    assert sig.weights == ()
    assert [(d.name, d.kind) for d in sig.dims] == [
        ("sample", DimKind.SAMPLE),
        ("channel", None),
        ("height", DimKind.ATTRIBUTE),
        ("width", DimKind.ATTRIBUTE),
    ]
    sig = Split((3, 1), -1).infer("split1", [TensorSpec((2, 5, 4))])
    assert [o.shape for o in sig.outputs] == [(2, 5, 3), (2, 5, 1)]


def test_flops_and_regions():
    op = Split((1, 3), 2)
    sig = op.infer("split1", [TensorSpec((4, 2, 4, 6))])
    assert op.flops(sig, full_region(sig.output_shape)) == (0.0, 0.0)
    tile = ((0, 2), (1, 2), (0, 1), (0, 3))
    assert op.input_regions(sig, tile) == (((0, 2), (1, 2), (0, 4), (0, 3)),)
    assert op.output_regions(sig, tile) == (
        ((0, 2), (1, 2), (0, 1), (0, 3)),
        ((0, 2), (1, 2), (0, 3), (0, 3)),
    )


def test_forward_matches_slicing():
    x = np.random.default_rng(0).standard_normal((2, 6, 3))
    a, b, c = Split((1, 2, 3), 1).forward([x], [])
    np.testing.assert_array_equal(a, x[:, 0:1])
    np.testing.assert_array_equal(b, x[:, 1:3])
    np.testing.assert_array_equal(c, x[:, 3:6])


@pytest.mark.parametrize(
    "shape, sizes, axis", [((2, 5, 2, 2), (2, 3), 1), ((3, 4), (1, 1, 2), -1), ((2, 3, 4), (4,), 2)]
)
def test_gradients(shape, sizes, axis):
    op = Split(sizes, axis)
    sig = op.infer("split1", [TensorSpec(shape)])
    assert_gradients(op, random_inputs(sig, np.random.default_rng(0)), [])


def test_regions_are_sufficient():
    op = Split((2, 1, 3), 1)
    sig = op.infer("split1", [TensorSpec((4, 6, 4, 2))])
    assert assert_regions_sufficient(op, sig, random_inputs(sig, np.random.default_rng(0)), []) > 10


@pytest.mark.parametrize(
    "sizes, axis, inputs, match",
    [
        ((2, 2), 1, [TensorSpec((4, 4))] * 2, r"split 'split1': expected 1 input"),
        (
            (2, 2),
            0,
            [TensorSpec((4, 4))],
            r"split 'split1': cannot split along axis 0, the sample dimension "
            r"\(input shape \(4, 4\)\)",
        ),
        (
            (2, 2),
            3,
            [TensorSpec((4, 4))],
            r"split 'split1': axis 3 is out of range for input shape \(4, 4\)",
        ),
        (
            (),
            1,
            [TensorSpec((4, 4))],
            r"split 'split1': sizes must be one or more positive lengths, got \(\)",
        ),
        (
            (4, 0),
            1,
            [TensorSpec((4, 4))],
            r"split 'split1': sizes must be one or more positive lengths, got \(4, 0\)",
        ),
        (
            (2, 3),
            1,
            [TensorSpec((4, 4))],
            r"split 'split1': sizes \(2, 3\) sum to 5, "
            r"but axis 1 of input shape \(4, 4\) has length 4",
        ),
    ],
)
def test_shape_errors(sizes, axis, inputs, match):
    with pytest.raises(ShapeError, match=match):
        Split(sizes, axis).infer("split1", inputs)
