"""flexflow.data's checks of a data set before it is cut into batches (cuPyNumeric's in
tests/training/test_api.py, which runs in Legate)."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.data import check_finite
from flexflow.errors import ShapeError


@pytest.mark.parametrize(
    "values",
    [
        np.ones((4, 3), np.float32),
        np.full((3, 2), 3e38, np.float32),  # finite, though their sum overflows float32
        np.full((2, 2), 1e38),  # float64 within float32's range
        np.array([1, 2, 3], np.int64),  # ids and labels: no NaN to hold
        np.array([True, False]),
        np.zeros((0, 5), np.float32),  # no samples (refused elsewhere)
        np.float32(2.0),
        [[0.5, 1.5]],  # a list, as fit takes it
    ],
)
def test_finite_data_passes(values):
    check_finite("x", values)


@pytest.mark.parametrize(
    "values, bad, first",
    [
        (np.array([[1, 2], [3, np.nan], [np.inf, 0]], np.float32), 2, 1),
        (np.array([[0.0], [-np.inf]], np.float16), 1, 1),
        (np.array([[1e39], [1.0]]), 1, 0),  # float64 beyond float32: inf in the model
        ([[1.0, float("nan")]], 1, 0),
        (np.ones((4, 2, 3), np.float32)[:, ::-1].copy() * np.array([1, np.nan, 1]), 4, 0),
    ],
)
def test_nan_inf_and_values_beyond_float32_are_named_with_their_samples(values, bad, first):
    with pytest.raises(ShapeError, match=rf"input 'x' holds .* in {bad} of its \d+ samples "
                       rf"\(the first is sample {first}\); clean or drop them first"):  # fmt: skip
        check_finite("input 'x'", values)
