"""The flat parameter layout: every parameter a view of one buffer, back to back."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flexflow.ops import native_updates as native
from flexflow.optimizers import AdamOptimizer, sum_in_order
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


def test_runs_join_neighbouring_parameters_of_the_same_l2_lambda():
    layout = FlatLayout.of([(2, 3), (3,), (4,), (2,), (5,)], [0.0, 0.0, 0.1, 0.1, 0.0])
    assert layout.runs == ((0, 9, 0.0), (9, 15, 0.1), (15, 20, 0.0))
    assert FlatLayout.of([(2, 3), (3,)]).runs == ((0, 9, 0.0),)  # no regularizer: one run
    assert FlatLayout.of([(2, 3), (3,)], [0.0, 0.0]).l2 == ()


def test_the_c_update_of_a_flat_buffer_adds_each_runs_l2_to_its_elements_alone():
    """What a C step's pending update runs (ff_apply_update_runs_f32 with the plan's runs):
    the bits of numpy's update of each parameter with its own lambda."""
    rng = np.random.default_rng(2)
    layout = FlatLayout.of([(40, 30), (30,), (2000,), (7,)], [0.25, 0.0, 0.001, 0.0])
    optimizer = AdamOptimizer(1e-2, weight_decay=1e-3)
    weight = rng.standard_normal(layout.size).astype(np.float32)
    partials = rng.standard_normal((3, layout.size)).astype(np.float32)
    states = [rng.random(layout.size).astype(np.float32) for _ in range(2)]
    want_weight, want_states = weight.copy(), [s.copy() for s in states]
    for (start, stop), l2 in zip(layout.ranges, layout.l2, strict=True):
        part = slice(start, stop)
        summed = sum_in_order(partials[:, part])
        optimizer.apply(want_weight[part], summed, [s[part] for s in want_states], 4, l2)
    update = native.ffi.new("ff_update *")
    update.kind, update.n, update.copies = native.UPDATE_ADAM, layout.size, 3
    pointers = [native.ffi.from_buffer("float[]", a) for a in (weight, *partials, *states)]
    update.weight, (update.state0, update.state1) = pointers[0], pointers[4:]
    rows = native.ffi.new("float *[]", pointers[1:4])  # alive through the call
    update.partials = rows
    update.h = [float(h) for h in optimizer.native_update(4)[1]]
    runs = native.L2Runs(layout.runs)
    native.lib.ff_apply_update_runs_f32(update, runs.struct)
    np.testing.assert_array_equal(weight, want_weight)
    for got, want in zip(states, want_states, strict=True):
        np.testing.assert_array_equal(got, want)
