"""The update sums the devices' partial weight gradients left to right, in device order."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.optimizers import sum_in_order


@settings(max_examples=60, deadline=None)
@given(
    devices=st.integers(1, 9),
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    seed=st.integers(0, 2**32 - 1),
)
def test_partials_are_summed_left_to_right(devices, shape, seed):
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.integers(-3, 4, (devices, *([1] * len(shape))))
    partials = (rng.standard_normal((devices, *shape)) * scale).astype(np.float32)
    expected = partials[0].copy()
    for partial in partials[1:]:
        expected = expected + partial
    total = sum_in_order(partials)
    assert total.dtype == np.float32 and total.shape == tuple(shape)
    np.testing.assert_array_equal(total, expected)


def test_the_sum_is_a_new_array_the_optimizer_may_overwrite():
    partials = np.ones((1, 3), np.float32)
    total = sum_in_order(partials)
    total *= 5
    np.testing.assert_array_equal(partials, np.ones((1, 3), np.float32))
