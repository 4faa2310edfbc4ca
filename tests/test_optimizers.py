"""Optimizers: updates against independent float64 recurrences, tiling invariance, validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import FlexFlowError
from flexflow.ops import native_updates
from flexflow.optimizers import (
    AdamOptimizer,
    SGDOptimizer,
    chosen_optimizer,
    optimizer_from_json,
    sum_in_order,
)


def run(optimizer, weight, grads, l2=0.0):
    states = tuple(np.zeros_like(weight) for _ in optimizer.state_names)
    for step, grad in enumerate(grads, start=1):
        weight, states = optimizer.update(weight, grad, states, step, l2)
    return weight


def grads_for(rng, shape, steps=5):
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(steps)]


def test_plain_sgd_is_one_subtraction():
    w = np.array([1.0, -2.0], dtype=np.float32)
    g = np.array([0.5, 0.25], dtype=np.float32)
    new, states = SGDOptimizer(0.1).update(w, g, (), 1)
    assert states == ()
    np.testing.assert_array_equal(new, np.array([0.95, -2.025], dtype=np.float32))
    assert new.dtype == np.float32


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_and_weight_decay_follow_the_recurrence(nesterov):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    grads = grads_for(rng, (3, 4))
    lr, mu, wd = 0.05, 0.9, 1e-2
    w, v = w0.astype(np.float64), np.zeros((3, 4))
    for g in grads:  # PyTorch's definition, in float64
        g = g + wd * w
        v = mu * v + g
        w = w - lr * (g + mu * v if nesterov else v)
    got = run(SGDOptimizer(lr, momentum=mu, weight_decay=wd, nesterov=nesterov), w0, grads)
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_adam_follows_kingma_and_ba():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((5,)).astype(np.float32)
    grads = grads_for(rng, (5,), steps=6)
    lr, b1, b2, eps, wd = 1e-2, 0.8, 0.99, 1e-8, 1e-3
    w, m, v = w0.astype(np.float64), np.zeros(5), np.zeros(5)
    for t, g in enumerate(grads, start=1):
        g = g + wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    got = run(AdamOptimizer(lr, beta1=b1, beta2=b2, epsilon=eps, weight_decay=wd), w0, grads)
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_an_l2_regularizer_adds_lambda_times_the_weight_to_the_gradient():
    """FlexFlow's REG_MODE_L2: the gradient gains lambda * W (that of lambda/2 * ||W||^2), by
    hand: g' = (0.5, 0.25) + 0.1 * (1, -2) = (0.6, 0.05); w' = w - 0.1 g'."""
    w = np.array([1.0, -2.0], dtype=np.float32)
    g = np.array([0.5, 0.25], dtype=np.float32)
    new, _ = SGDOptimizer(0.1).update(w, g, (), 1, l2=0.1)
    np.testing.assert_allclose(new, [0.94, -2.005], rtol=1e-6)
    unregularized, _ = SGDOptimizer(0.1).update(w, g, (), 1)
    np.testing.assert_allclose(unregularized, [0.95, -2.025], rtol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_with_an_l2_regularizer_follows_the_recurrence(nesterov):
    """The regularizer's lambda * w joins the gradient before momentum, beside weight decay."""
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    grads = grads_for(rng, (3, 4))
    lr, mu, wd, l2 = 0.05, 0.9, 1e-2, 0.2
    w, v = w0.astype(np.float64), np.zeros((3, 4))
    for g in grads:
        g = g + l2 * w + wd * w
        v = mu * v + g
        w = w - lr * (g + mu * v if nesterov else v)
    optimizer = SGDOptimizer(lr, momentum=mu, weight_decay=wd, nesterov=nesterov)
    got = run(optimizer, w0, grads, l2=l2)
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    assert np.abs(run(optimizer, w0, grads) - got).max() > 1e-3  # it changes the weights


def test_adam_with_an_l2_regularizer_follows_kingma_and_ba():
    rng = np.random.default_rng(6)
    w0 = rng.standard_normal((5,)).astype(np.float32)
    grads = grads_for(rng, (5,), steps=6)
    lr, b1, b2, eps, wd, l2 = 1e-2, 0.8, 0.99, 1e-8, 1e-3, 0.5
    w, m, v = w0.astype(np.float64), np.zeros(5), np.zeros(5)
    for t, g in enumerate(grads, start=1):
        g = g + l2 * w + wd * w
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    optimizer = AdamOptimizer(lr, beta1=b1, beta2=b2, epsilon=eps, weight_decay=wd)
    got = run(optimizer, w0, grads, l2=l2)
    np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
    assert np.abs(run(optimizer, w0, grads) - got).max() > 1e-4


def test_adam_first_step_moves_every_weight_by_about_the_learning_rate():
    w = np.zeros(4, dtype=np.float32)
    g = np.array([1e-3, -5.0, 2.0, 1e2], dtype=np.float32)
    new, _ = AdamOptimizer(0.01).update(w, g, (np.zeros(4), np.zeros(4)), 1)
    np.testing.assert_allclose(new, -0.01 * np.sign(g), rtol=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    optimizer=st.sampled_from(
        [
            SGDOptimizer(0.1),
            SGDOptimizer(0.1, momentum=0.9, weight_decay=1e-4),
            SGDOptimizer(0.1, momentum=0.5, nesterov=True),
            AdamOptimizer(1e-3, weight_decay=1e-2),
        ]
    ),
    rows=st.integers(1, 9),
    cuts=st.lists(st.integers(0, 9), max_size=4),
    seed=st.integers(0, 2**16),
)
def test_tiled_updates_are_bit_identical_to_one_update(optimizer, rows, cuts, seed):
    """The runtime updates any tiling of a weight; every tiling must give the same bits."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, 3)).astype(np.float32)
    g = rng.standard_normal((rows, 3)).astype(np.float32)
    states = tuple(rng.random((rows, 3)).astype(np.float32) for _ in optimizer.state_names)
    whole, whole_states = optimizer.update(w, g, states, 3)
    bounds = sorted({0, rows, *(c for c in cuts if c < rows)})
    for a, b in zip(bounds, bounds[1:], strict=False):
        tile, tile_states = optimizer.update(w[a:b], g[a:b], tuple(s[a:b] for s in states), 3)
        np.testing.assert_array_equal(tile, whole[a:b])
        for got, want in zip(tile_states, whole_states, strict=True):
            np.testing.assert_array_equal(got, want[a:b])


OPTIMIZERS = st.one_of(
    st.builds(
        SGDOptimizer,
        learning_rate=st.floats(1e-4, 1.0),
        momentum=st.sampled_from([0.0, 0.5, 0.9, 0.99]),
        weight_decay=st.sampled_from([0.0, 1e-4, 0.1]),
    ),
    st.builds(
        SGDOptimizer,
        learning_rate=st.floats(1e-4, 1.0),
        momentum=st.floats(0.05, 0.95),
        nesterov=st.just(True),
    ),
    st.builds(
        AdamOptimizer,
        learning_rate=st.floats(1e-5, 0.1),
        beta1=st.sampled_from([0.0, 0.8, 0.9]),
        beta2=st.sampled_from([0.9, 0.999]),
        epsilon=st.sampled_from([1e-8, 1e-3]),
        weight_decay=st.sampled_from([0.0, 1e-2]),
    ),
)


@settings(max_examples=80, deadline=None)
@given(
    optimizer=OPTIMIZERS,
    devices=st.integers(1, 4),
    size=st.sampled_from([1, 7, 1023, 1024, 1025, 2500]),
    step=st.integers(1, 50),
    seed=st.integers(0, 2**16),
    l2=st.sampled_from([0.0, 1e-3, 0.5]),
)
def test_a_data_parallel_update_in_one_pass_gives_the_bits_of_the_reference(
    optimizer, devices, size, step, seed, l2
):
    """The step task's fused C update (summing the devices' partial gradients on the way) must
    give what numpy's update of their sum gives, bit for bit: the runtime mixes both paths
    (strided tiles take numpy's), and training is bit-identical across strategies."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.integers(-4, 3, (devices, 1))
    partials = (rng.standard_normal((devices, size)) * scale).astype(np.float32)
    weight = rng.standard_normal(size).astype(np.float32)
    states = [rng.random(size).astype(np.float32) for _ in optimizer.state_names]
    assert native_updates.updatable_in_place(weight, partials, *states)  # the C path
    want_weight, want_states = weight.copy(), [s.copy() for s in states]
    optimizer.apply(want_weight, sum_in_order(partials), want_states, step, l2)
    before = partials.copy()
    optimizer.apply_partials(weight, partials, states, step, l2)
    np.testing.assert_array_equal(weight, want_weight)
    for got, want in zip(states, want_states, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(partials, before)  # the gradients are only read


def test_a_strided_tile_is_updated_through_numpy_with_the_same_bits():
    optimizer = SGDOptimizer(0.1, momentum=0.9)
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((6, 8)).astype(np.float32)
    partials = rng.standard_normal((2, 6, 8)).astype(np.float32)
    velocity = rng.random((6, 8)).astype(np.float32)
    want, want_velocity = optimizer.update(weight[:, 2:5], sum_in_order(partials[:, :, 2:5]),
                                           (velocity[:, 2:5],), 4)  # fmt: skip
    tile, tile_velocity = weight[:, 2:5], velocity[:, 2:5]
    assert not native_updates.updatable_in_place(tile, partials[:, :, 2:5], tile_velocity)
    optimizer.apply_partials(tile, partials[:, :, 2:5], (tile_velocity,), 4)
    np.testing.assert_array_equal(weight[:, 2:5], want)
    np.testing.assert_array_equal(velocity[:, 2:5], want_velocity[0])
    # ... and with an L2 regularizer
    want, want_velocity = optimizer.update(weight[:, 2:5], sum_in_order(partials[:, :, 2:5]),
                                           (velocity[:, 2:5],), 5, l2=0.3)  # fmt: skip
    optimizer.apply_partials(tile, partials[:, :, 2:5], (tile_velocity,), 5, l2=0.3)
    np.testing.assert_array_equal(weight[:, 2:5], want)
    np.testing.assert_array_equal(velocity[:, 2:5], want_velocity[0])


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: SGDOptimizer(0.0), "learning_rate must be a positive number"),
        (lambda: SGDOptimizer(0.1, momentum=1.0), r"momentum must be in \[0, 1\)"),
        (lambda: SGDOptimizer(0.1, weight_decay=-1), "weight_decay must be a number >= 0"),
        (lambda: SGDOptimizer(0.1, nesterov=True), "nesterov needs a momentum"),
        (lambda: AdamOptimizer(0.1, beta2=1.5), r"beta2 must be in \[0, 1\)"),
        (lambda: AdamOptimizer(0.1, epsilon=0), "epsilon must be a positive number"),
        (lambda: SGDOptimizer("0.1"), "learning_rate must be a positive number, got .0.1."),
        (lambda: optimizer_from_json({"type": "lion"}), "unknown optimizer type 'lion'"),
        (lambda: optimizer_from_json({"type": "sgd", "lr": 1}), "optimizer sgd"),
    ],
)
def test_bad_settings_are_refused(make, match):
    with pytest.raises(FlexFlowError, match=match):
        make()


@pytest.mark.parametrize(
    "optimizer", [SGDOptimizer(0.2, momentum=0.9, nesterov=True), AdamOptimizer(weight_decay=0.1)]
)
def test_json_round_trip(optimizer):
    assert optimizer_from_json(optimizer.to_json()) == optimizer


def test_optimizers_are_chosen_by_name_at_the_given_rate_and_nothing_else_passes():
    assert chosen_optimizer(None, 0.2) == SGDOptimizer(0.2)
    assert chosen_optimizer("Adam", 0.003) == AdamOptimizer(0.003)
    given = SGDOptimizer(0.1, momentum=0.9)
    assert chosen_optimizer(given, 0.5) is given
    with pytest.raises(FlexFlowError, match="unknown optimizer 'rmsprop'"):
        chosen_optimizer("rmsprop", 0.1)
    with pytest.raises(FlexFlowError, match="must be an SGDOptimizer or AdamOptimizer"):
        chosen_optimizer(0.1, 0.1)


def test_flexflows_argument_order_is_refused_not_misread():
    """FlexFlow's AdamOptimizer(ffmodel, alpha, beta1, beta2, weight_decay, epsilon): without
    the model, positional arguments swapped epsilon and weight decay silently."""
    from flexflow import FFModel

    with pytest.raises(TypeError):
        AdamOptimizer(0.001, 0.9, 0.999, 1e-4, 1e-8)
    with pytest.raises(TypeError):
        SGDOptimizer(0.01, 0.9, True, 5e-4)
    with pytest.raises(FlexFlowError, match=r"SGDOptimizer takes no model: .* SGDOptimizer\(lr"):
        SGDOptimizer(FFModel())  # flexflow.core's SGDOptimizer(ffmodel, lr, ...) takes it
