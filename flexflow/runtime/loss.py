"""Losses on the model's output: the value and its gradient with respect to that output."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flexflow.errors import ShapeError

Loss = Callable[[np.ndarray, np.ndarray], tuple[float, np.ndarray]]


def mean_squared_error(prediction: np.ndarray, target: np.ndarray) -> tuple[float, np.ndarray]:
    if prediction.shape != np.shape(target):
        raise ShapeError(
            f"mean_squared_error: target shape {np.shape(target)} differs from the model's "
            f"output {prediction.shape}; pass one target per output element."
        )
    diff = prediction.astype(np.float64) - target
    return float(np.mean(diff**2)), 2.0 * diff / diff.size


def sparse_categorical_crossentropy(
    probabilities: np.ndarray, labels: np.ndarray
) -> tuple[float, np.ndarray]:
    """Cross-entropy of softmax outputs (N, classes) against integer labels (N,), averaged."""
    n = probabilities.shape[0]
    labels = np.asarray(labels).reshape(-1)
    if probabilities.ndim != 2 or labels.shape != (n,):
        raise ShapeError(
            f"sparse_categorical_crossentropy: expects (sample, classes) probabilities and one "
            f"label per sample, got output {probabilities.shape} and labels {np.shape(labels)}."
        )
    if labels.min() < 0 or labels.max() >= probabilities.shape[1]:
        raise ShapeError(
            f"sparse_categorical_crossentropy: labels must lie in [0, {probabilities.shape[1]}), "
            f"got [{labels.min()}, {labels.max()}]."
        )
    picked = probabilities[np.arange(n), labels].astype(np.float64)
    picked = np.maximum(picked, 1e-12)  # log(0) guard; the softmax of finite inputs is positive
    grad = np.zeros(probabilities.shape)
    grad[np.arange(n), labels] = -1.0 / (n * picked)
    return float(-np.mean(np.log(picked))), grad


LOSSES: dict[str, Loss] = {
    "mean_squared_error": mean_squared_error,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
}
