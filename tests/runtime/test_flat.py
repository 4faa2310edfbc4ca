"""The flat parameter layout: every parameter a view of one buffer, back to back."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flexflow.runtime.flat import FlatLayout

shapes = st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple), max_size=6)


@given(shapes)
def test_join_then_split_gives_back_every_parameter(param_shapes):
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(shape).astype(np.float32) for shape in param_shapes]
    layout = FlatLayout.of(param_shapes)
    flat = layout.join(values)
    assert flat.shape == (sum(v.size for v in values),) and layout.size == flat.size
    for got, value in zip(layout.split(flat, range(len(values))), values, strict=True):
        assert got.shape == value.shape and np.array_equal(got, value)


@given(shapes)
def test_split_views_cover_the_buffer_once(param_shapes):
    layout = FlatLayout.of(param_shapes)
    flat = np.zeros(layout.size, dtype=np.float32)
    for view in layout.split(flat, reversed(range(len(param_shapes)))):
        assert np.shares_memory(view, flat)  # a view, so the task writes the store itself
        view += 1
    assert np.all(flat == 1)  # every element in exactly one parameter
