"""Losses: values by hand and gradients against central differences."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.runtime.loss import (
    LOSS_IDS,
    categorical_crossentropy,
    check_targets,
    correct_predictions,
    loss_name,
    loss_tile,
    mean_squared_error,
    sparse_categorical_crossentropy,
)


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
            "one integer label per prediction",
        ),
    ],
)
def test_loss_errors(call, match):
    with pytest.raises(ShapeError, match=match):
        call()


def test_categorical_crossentropy_matches_sparse_on_one_hot_targets():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((3, 4))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = np.array([2, 0, 3])
    one_hot = np.eye(4)[labels]
    loss, grad = categorical_crossentropy(probs, one_hot)
    sparse_loss, sparse_grad = sparse_categorical_crossentropy(probs, labels)
    assert loss == pytest.approx(sparse_loss)
    np.testing.assert_allclose(grad, sparse_grad)
    soft = rng.dirichlet(np.ones(4), size=3)
    f = lambda p: categorical_crossentropy(p, soft)[0]  # noqa: E731
    np.testing.assert_allclose(categorical_crossentropy(probs, soft)[1], numerical(f, probs.copy()))


def test_loss_tile_counts_only_the_valid_samples():
    probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    labels = np.array([0, 1, 1, 0])
    sparse = LOSS_IDS.index("sparse_categorical_crossentropy")
    value, grad, correct = loss_tile(sparse, probs, labels, total=3, valid=3)
    assert value == pytest.approx(-(np.log(0.9) + np.log(0.8) + np.log(0.4)) / 3)
    assert correct == 2  # the third sample's guess (class 0) is wrong; the fourth is padding
    assert not grad[3].any()
    assert loss_tile(sparse, probs, labels, total=3, valid=0)[2] == 0


def test_correct_predictions_reads_labels_or_one_hot_targets():
    probs = np.array([[0.1, 0.9], [0.7, 0.3]])
    assert correct_predictions(probs, np.array([1, 1])) == 1
    assert correct_predictions(probs, np.array([[0.0, 1.0], [1.0, 0.0]])) == 2


def _softmax(logits):
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_cross_entropies_average_over_every_position_of_a_sequence_output():
    """(sample, position, classes) outputs: one prediction per position, labelled by a
    (sample, position) array or a target distribution per position; the loss is the flattened
    (predictions, classes) one and its gradient that one's, reshaped."""
    rng = np.random.default_rng(3)
    probs = _softmax(rng.standard_normal((2, 3, 4)))
    labels = rng.integers(0, 4, (2, 3))
    loss, grad = sparse_categorical_crossentropy(probs, labels)
    flat_loss, flat_grad = sparse_categorical_crossentropy(probs.reshape(6, 4), labels.reshape(6))
    assert loss == pytest.approx(flat_loss)
    assert loss == pytest.approx(-np.mean(np.log(np.take_along_axis(probs, labels[..., None], -1))))
    np.testing.assert_allclose(grad, flat_grad.reshape(2, 3, 4))
    f = lambda p: sparse_categorical_crossentropy(p, labels)[0]  # noqa: E731
    np.testing.assert_allclose(grad, numerical(f, probs.copy()), rtol=1e-5)
    dense_loss, dense_grad = categorical_crossentropy(probs, np.eye(4)[labels])
    assert dense_loss == pytest.approx(loss)
    np.testing.assert_allclose(dense_grad, grad)
    with pytest.raises(ShapeError, match=r"shaped \(2, 3\)"):
        sparse_categorical_crossentropy(probs, labels.reshape(6))


def test_accuracy_counts_each_position_and_padding_rows_count_nothing():
    probs = np.array([[[0.9, 0.1], [0.3, 0.7]], [[0.6, 0.4], [0.2, 0.8]]])  # (2, 2, 2)
    labels = np.array([[0, 0], [1, 1]])
    assert correct_predictions(probs, labels) == 2  # (0, 0) and (1, 1) right
    assert correct_predictions(probs, np.eye(2)[labels]) == 2
    sparse = LOSS_IDS.index("sparse_categorical_crossentropy")
    value, grad, correct = loss_tile(sparse, probs, labels, total=2, valid=1)
    assert value == pytest.approx(-(np.log(0.9) + np.log(0.3)) / 2)
    assert correct == 1 and not grad[1].any()


def test_flexflow_loss_type_names_are_understood():
    assert loss_name("LOSS_SPARSE_CATEGORICAL_CROSSENTROPY") == "sparse_categorical_crossentropy"
    with pytest.raises(ShapeError, match="unknown loss 'hinge'"):
        loss_name("hinge")


@pytest.mark.parametrize(
    "name, shape, target, match",
    [
        ("sparse_categorical_crossentropy", (4, 10), np.array([1, 2, 3, 12]), "labels must lie"),
        ("sparse_categorical_crossentropy", (4, 3, 10), np.zeros(4, int), r"shaped \(4, 3\)"),
        ("sparse_categorical_crossentropy", (4,), np.zeros(4, int), "sample, ..., classes"),
        ("mean_squared_error", (4, 2), np.zeros((2, 4)), "target shape"),
        ("categorical_crossentropy", (4, 3), np.zeros((4, 2)), "same shape"),
    ],
)
def test_check_target_refuses_what_the_loss_would(name, shape, target, match):
    from flexflow.runtime.loss import check_target

    with pytest.raises(ShapeError, match=match):
        check_target(name, shape, target)


def test_check_target_accepts_fitting_targets():
    from flexflow.runtime.loss import check_target

    check_target("sparse_categorical_crossentropy", (4, 10), np.zeros((4, 1), int))
    check_target("sparse_categorical_crossentropy", (2, 3, 5), np.full((2, 3), 4))
    check_target("categorical_crossentropy", (2, 3, 5), np.zeros((2, 3, 5)))
    check_target("mean_squared_error", (2, 3), np.zeros((2, 3)))


@pytest.mark.parametrize(
    "loss, target, match",
    [
        ("sparse_categorical_crossentropy", None, r"no targets given \(y is None\)"),
        (
            "sparse_categorical_crossentropy",
            np.array([0, 1, 2, 3, 4, 2]),
            r"in \[0, 4\), got \[0, 4\]",
        ),
        ("sparse_categorical_crossentropy", np.zeros(6, np.float32), "must be integers"),
        ("sparse_categorical_crossentropy", np.zeros((6, 2), np.int32), "one integer label"),
        ("categorical_crossentropy", np.zeros((6, 3)), "target of the same shape"),
        ("mean_squared_error", np.zeros((5, 4)), "target shape"),
        (  # NaN or inf showed only as a loss of nan
            "mean_squared_error",
            np.array([[0.0] * 4] * 4 + [[np.nan, 0, 0, 0], [np.inf, 0, 0, 0]]),
            r"mean_squared_error: y holds NaN, infinite or beyond-float32 values in 2 of its 6 "
            r"samples \(the first is sample 4\)",
        ),
        (  # trained, with a loss unbounded below
            "categorical_crossentropy",
            np.eye(4)[[0, 1, 2, 3, 0, 1]] - np.eye(4)[[0, 0, 0, 1, 0, 0]] * 2,
            r"targets are probabilities .* negative ones \(the first in sample 0\)",
        ),
    ],
)
def test_a_data_sets_targets_are_checked_whole(loss, target, match):
    """Before the first batch: a bad label in the last one is found before any training."""
    with pytest.raises(ShapeError, match=match):
        check_targets(loss, (2, 4), target, 6)


def test_good_targets_pass_whole():
    check_targets("sparse_categorical_crossentropy", (2, 4), np.array([0, 3, 1, 2, 0, 1]), 6)
    check_targets("sparse_categorical_crossentropy", (2, 4), np.zeros((6, 1), np.int64), 6)
    check_targets("mean_squared_error", (2, 4), np.zeros((6, 4)), 6)


@pytest.mark.parametrize("loss", ["sparse", "sparse_c_tile", "categorical"])
def test_a_confidently_wrong_prediction_keeps_its_gradient(loss):
    """Through the softmax's backward, a cross-entropy's gradient w.r.t. the logits is
    (p - onehot) / N. Probabilities clipped at 1e-12 kept only p / 1e-12 of it: a label whose
    logit lay 28 or more below the largest stopped learning (helper's comparison with
    PyTorch: -2.3e-24 instead of -0.125 at a gap of 80)."""
    from flexflow.ops.softmax import Softmax

    gaps = np.array([0.0, 10.0, 27.0, 30.0, 40.0, 60.0, 80.0, 86.0])
    logits = np.zeros((len(gaps), 5))
    logits[:, 1] = gaps  # the largest logit is class 1's; the label is class 0
    labels = np.zeros(len(gaps), np.int64)
    exact = np.exp(logits - logits.max(-1, keepdims=True))
    exact /= exact.sum(-1, keepdims=True)
    want = (exact - np.eye(5)[labels]) / len(gaps)  # float64, from the logits
    probabilities = Softmax().forward([logits.astype(np.float32)], [])[0]
    if loss == "sparse":
        _, grad = sparse_categorical_crossentropy(probabilities, labels)
    elif loss == "sparse_c_tile":
        sparse = LOSS_IDS.index("sparse_categorical_crossentropy")
        _, grad, _ = loss_tile(sparse, probabilities, labels, len(gaps), len(gaps))
    else:
        _, grad = categorical_crossentropy(probabilities, np.eye(5)[labels])
    (dz,), _ = Softmax().backward(
        [logits.astype(np.float32)], [], [probabilities], [grad.astype(np.float32)]
    )
    np.testing.assert_allclose(dz, want, rtol=1e-5, atol=1e-9)


def test_the_gpu_losses_clip_where_the_reference_does():
    """The NVRTC source spells the clip as a literal (no <cfloat> there); C uses FLT_MIN."""
    import re

    from flexflow.gpu.sources_nn import TRAINING
    from flexflow.runtime.loss import SMALLEST_P

    source = "".join(TRAINING) if isinstance(TRAINING, tuple) else TRAINING
    (literal,) = re.findall(r"#define FF_SMALLEST_P (\S+)", source)
    assert float(literal) == SMALLEST_P == float(np.finfo(np.float32).tiny)
