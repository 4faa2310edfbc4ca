"""Padding of convolution and pooling tiles: what np.pad gives, and no copy when nothing pads."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops.window import crop_hw_sides, pad_hw_sides

PADS = st.tuples(st.integers(0, 3), st.integers(0, 3))


@settings(max_examples=60, deadline=None)
@given(rows=PADS, cols=PADS, value=st.sampled_from([0.0, -np.inf, 2.5]), seed=st.integers(0, 99))
def test_padding_is_np_pad_and_crop_undoes_it(rows, cols, value, seed):
    x = np.random.default_rng(seed).standard_normal((2, 3, 4, 5)).astype(np.float32)
    padded = pad_hw_sides(x, rows, cols, value)
    want = np.pad(x, ((0, 0), (0, 0), rows, cols), constant_values=value)
    assert padded.dtype == x.dtype
    np.testing.assert_array_equal(padded, want)
    np.testing.assert_array_equal(crop_hw_sides(padded, rows, cols), x)


def test_nothing_to_pad_gives_the_tile_itself():
    x = np.ones((1, 2, 3, 3), np.float32)
    assert pad_hw_sides(x, (0, 0), (0, 0)) is x
