"""The sparse cross-entropy's C tile (float32 outputs, ops/native_sparse.py `sparse_xent`)
against the numpy reference it replaces in `loss_tile`: the same gradient bits and correct
count, the loss to rounding, for padded tiles, per-token outputs, ties and NaNs; bad labels
still refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.errors import ShapeError
from flexflow.runtime.loss import (
    LOSS_IDS,
    correct_predictions,
    loss_tile,
    sparse_categorical_crossentropy,
)

SPARSE = LOSS_IDS.index("sparse_categorical_crossentropy")


def _reference(probabilities, labels, total, valid):
    """loss_tile's numpy path, on the same float32 outputs."""
    grad = np.zeros(probabilities.shape)
    if valid == 0:
        return 0.0, grad.astype(np.float32), 0
    value, grad[:valid] = sparse_categorical_crossentropy(
        probabilities[:valid], labels[:valid], total
    )
    correct = correct_predictions(probabilities[:valid], labels[:valid])
    return value, grad.astype(np.float32), correct


@settings(max_examples=80, deadline=None)
@given(
    samples=st.integers(1, 12),
    positions=st.sampled_from([(), (3,)]),
    classes=st.integers(1, 9),
    padding=st.integers(0, 4),
    seed=st.integers(0, 10_000),
    ties=st.booleans(),
)
def test_the_c_tile_computes_the_reference(samples, positions, classes, padding, seed, ties):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((samples, *positions, classes))
    if ties:  # repeated largest outputs: the first one is the prediction
        logits = np.round(logits)
    probabilities = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    probabilities = probabilities.astype(np.float32)
    labels = rng.integers(0, classes, (samples, *positions))
    total = samples * int(np.prod(positions, dtype=int)) + 3
    valid = max(0, samples - padding)
    value, grad, correct = loss_tile(SPARSE, probabilities, labels, total, valid)
    want_value, want_grad, want_correct = _reference(probabilities, labels, total, valid)
    assert grad.dtype == np.float32 and grad.shape == probabilities.shape
    np.testing.assert_array_equal(grad, want_grad)
    assert correct == want_correct
    assert value == pytest.approx(want_value, rel=1e-12, abs=1e-15)


def test_nan_outputs_count_as_the_prediction_as_numpys_argmax_has_it():
    probabilities = np.array([[0.2, np.nan, 0.7], [0.1, 0.8, 0.1], [np.nan, 0.9, 0.0]], np.float32)
    labels = np.array([1, 1, 0])
    _, _, correct = loss_tile(SPARSE, probabilities, labels, 3, 3)
    assert correct == correct_predictions(probabilities, labels) == 3


def test_column_labels_and_zero_probabilities_take_the_reference_path_results():
    probabilities = np.array([[1.0, 0.0], [0.5, 0.5]], np.float32)
    labels = np.array([[1], [0]])  # (N, 1)
    value, grad, correct = loss_tile(SPARSE, probabilities, labels, 2, 2)
    want_value, want_grad, want_correct = _reference(probabilities, labels.reshape(-1), 2, 2)
    np.testing.assert_array_equal(grad, want_grad)  # the clipped 1e-12 gives a finite gradient
    assert (value, correct) == (pytest.approx(want_value), want_correct)


@pytest.mark.parametrize(
    "labels, match",
    [
        (np.array([0, 3]), r"labels must lie in \[0, 3\)"),
        (np.array([0, -1]), r"labels must lie in \[0, 3\)"),
        (np.array([0.0, 1.0]), "labels must be integers"),
        (np.array([0, 1, 2]), "one integer label per prediction"),
    ],
)
def test_bad_labels_are_refused_with_the_references_message(labels, match):
    probabilities = np.full((2, 3), 1 / 3, np.float32)
    with pytest.raises(ShapeError, match=match):
        loss_tile(SPARSE, probabilities, labels, 2, 2)
