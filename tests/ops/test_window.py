"""Padding of convolution and pooling tiles: what np.pad gives, no copy when nothing pads, and
how many of a window's cells are real (an average pooling's divisor)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops.window import crop_hw_sides, pad_hw_sides, window_cell_counts

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


def test_window_cell_counts_leave_the_padding_out():
    # 3 wide at stride 1, one cell of padding each side of 4: the border windows hold 2 cells
    np.testing.assert_array_equal(window_cell_counts(4, 4, 3, 1, 1), [2, 3, 3, 2])
    # stride 2 over 8 (windows at -1, 1, 3, 5): only the first reaches into the padding
    np.testing.assert_array_equal(window_cell_counts(8, 4, 3, 2, 1), [2, 3, 3, 3])
    # a tile's slice of 5 rows with 2 rows of padding before it and windows past its end
    np.testing.assert_array_equal(window_cell_counts(5, 3, 4, 2, 2), [2, 4, 3])
