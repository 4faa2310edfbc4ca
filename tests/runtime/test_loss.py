"""Losses: values by hand and gradients against central differences."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.runtime.loss import mean_squared_error, sparse_categorical_crossentropy


def numerical(f, x, eps=1e-6):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + eps
        plus = f(x)
        x[i] = old - eps
        minus = f(x)
        x[i] = old
        grad[i] = (plus - minus) / (2 * eps)
    return grad


def test_mean_squared_error():
    pred, target = np.array([[1.0, 2.0], [3.0, 5.0]]), np.array([[1.0, 1.0], [1.0, 1.0]])
    loss, grad = mean_squared_error(pred, target)
    assert loss == pytest.approx((0 + 1 + 4 + 16) / 4)
    np.testing.assert_allclose(
        grad, numerical(lambda p: mean_squared_error(p, target)[0], pred.copy())
    )


def test_sparse_categorical_crossentropy():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 5))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = np.array([0, 3, 4, 1])
    loss, grad = sparse_categorical_crossentropy(probs, labels)
    assert loss == pytest.approx(-np.mean(np.log(probs[np.arange(4), labels])))
    f = lambda p: sparse_categorical_crossentropy(p, labels)[0]  # noqa: E731
    np.testing.assert_allclose(grad, numerical(f, probs.copy()), rtol=1e-5)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: mean_squared_error(np.zeros((2, 3)), np.zeros((3, 2))), "target shape"),
        (
            lambda: sparse_categorical_crossentropy(np.full((2, 3), 1 / 3), np.array([0, 3])),
            "labels must lie",
        ),
        (
            lambda: sparse_categorical_crossentropy(np.full((2, 3), 1 / 3), np.array([0])),
            "one label per sample",
        ),
    ],
)
def test_loss_errors(call, match):
    with pytest.raises(ShapeError, match=match):
        call()
