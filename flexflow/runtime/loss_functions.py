"""The losses as numpy functions of a tile of the model's output, each beside the checks of
the targets it takes (`flexflow.runtime.loss` holds the table of what differs between them).

Each loss works on a tile of the output (and the matching tile of the target) given the size of
the whole (`total`: elements for MSE, predictions for cross-entropy), so tasks holding the
output's tiles each compute their share of the loss and their tile of its gradient.

The cross-entropies take outputs of any rank whose last dimension holds the classes: (sample,
classes), or (sample, position, classes) for a language model's per-token predictions, with
one label (or target distribution) per prediction, averaged over all of them as Keras does.

The identity loss (FlexFlow's LOSS_IDENTITY) takes the model's output as the loss: the model
computes its own loss in the graph, and its labels are ignored.
"""

from __future__ import annotations

import numpy as np

from flexflow.errors import ShapeError
from flexflow.ops import native_sparse

Shape = tuple[int, ...]


def check_elementwise(output_shape: Shape, target) -> None:
    """Mean squared error's targets: one per output element."""
    if tuple(output_shape) != np.shape(target):
        raise ShapeError(
            f"mean_squared_error: target shape {np.shape(target)} differs from the model's "
            f"output {tuple(output_shape)}; pass one target per output element."
        )


def check_distributions(output_shape: Shape, target) -> None:
    """Categorical cross-entropy's targets: a distribution over the classes per prediction."""
    if len(output_shape) < 2 or np.shape(target) != tuple(output_shape):
        raise ShapeError(
            f"categorical_crossentropy: expects (sample, ..., classes) probabilities and a "
            f"target of the same shape, got output {tuple(output_shape)} and target "
            f"{np.shape(target)}."
        )


def check_integer_labels(name: str, dtype: np.dtype) -> None:
    """Labels are class indices: a task reading float ones aborted the process."""
    if dtype.kind not in "iu":
        raise ShapeError(
            f"{name}: labels must be integers (class indices), got {dtype}; pass "
            f"labels.astype(int), or one-hot targets with categorical_crossentropy."
        )


def _check_label_range(classes: int, low, high) -> None:
    if low < 0 or high >= classes:
        raise ShapeError(
            f"sparse_categorical_crossentropy: labels must lie in [0, {classes}), got "
            f"[{low}, {high}]."
        )


def shaped_labels(output_shape: Shape, labels) -> np.ndarray:
    """`labels` as an array, one per prediction of an output of `output_shape` ((N,) or (N, 1)
    for an (N, classes) output)."""
    labels = np.asarray(labels)
    expected = tuple(output_shape[:-1])
    two_d = len(output_shape) == 2 and labels.size == output_shape[0]
    if len(output_shape) < 2 or not (labels.shape == expected or two_d):
        raise ShapeError(
            f"sparse_categorical_crossentropy: expects (sample, ..., classes) probabilities and "
            f"one integer label per prediction, shaped {expected}; got output "
            f"{tuple(output_shape)} and labels {labels.shape}."
        )
    check_integer_labels("sparse_categorical_crossentropy", labels.dtype)
    return labels


def checked_labels(output_shape: Shape, labels) -> np.ndarray:
    """`shaped_labels`, each a class of the output's last dimension."""
    labels = shaped_labels(output_shape, labels)
    if labels.size:
        _check_label_range(output_shape[-1], labels.min(), labels.max())
    return labels


def check_stored_label_range(output_shape: Shape, labels) -> None:
    """`checked_labels`' range check on a cuPyNumeric store, by reductions (its shape and type
    are known to fit): a task would abort on a label out of range."""
    if output_shape[0]:
        _check_label_range(output_shape[-1], int(labels.min()), int(labels.max()))


def check_no_negatives(output_shape: Shape, target) -> None:
    """Probabilities are not negative (checked once for a data set: it reads all of them)."""
    if target.size and float(target.min()) < 0:
        negative = np.asarray((target < 0).reshape(len(target), -1).any(axis=1))
        raise ShapeError(
            f"categorical_crossentropy: targets are probabilities (one-hot, or rows summing "
            f"to 1), got negative ones (the first in sample {int(np.argmax(negative))}); for "
            "class indices use sparse_categorical_crossentropy."
        )


def check_identity_target(output_shape: Shape, target) -> None:
    """One target per sample, of numbers (ignored, but a store of several nodes copies them
    as float32: strings would fail there); NaN ones are not refused (never read)."""
    shape = np.shape(target)
    dtype = getattr(target, "dtype", None)
    dtype = np.asarray(target).dtype if dtype is None else dtype
    if dtype.kind not in "biuf":
        raise ShapeError(
            f"identity: its targets are ignored but must be numbers, got dtype {dtype}; pass "
            f"zeros shaped ({output_shape[0] if output_shape else 1},)."
        )
    if len(output_shape) and (not shape or shape[0] != output_shape[0]):
        raise ShapeError(
            f"identity: expects one (ignored) target per sample, {output_shape[0]} along the "
            f"first dimension, got a target shaped {shape}; pass zeros shaped "
            f"({output_shape[0]},)."
        )


def mean_squared_error(
    prediction: np.ndarray, target: np.ndarray, total: int | None = None
) -> tuple[float, np.ndarray]:
    check_elementwise(prediction.shape, target)
    total = prediction.size if total is None else total
    diff = prediction.astype(np.float64) - target
    return float(np.sum(diff**2) / total), 2.0 * diff / total


def identity(
    prediction: np.ndarray, target: np.ndarray | None = None, total: int | None = None
) -> tuple[float, np.ndarray]:
    """FlexFlow's identity loss: the model's output is the loss, the mean over the samples of
    each sample's output summed over its elements (a (B,) output: its mean; a (B, k) one: the
    mean of its rows' sums); `target` is ignored. Its gradient is 1 / samples for every output
    element, as FlexFlow's: its identity_loss_backward writes 1.0 and then scales by the loss's
    scale_factor, 1 / batch size (loss_functions.cc), which also divides our other losses.
    `total` is the samples of the whole batch (a tile holds some of them), so the tiles'
    shares add up to the batch's loss whichever dimensions split the output."""
    total = (prediction.shape[0] if prediction.ndim else 1) if total is None else total
    value = float(np.sum(prediction, dtype=np.float64) / total)
    return value, np.full(prediction.shape, 1.0 / total)


SMALLEST_P = float(np.finfo(np.float32).tiny)
"""Where the cross-entropies clip a probability (log(0) guard): float32's smallest normal
number, 1.18e-38, so that a label's gradient -1 / (total p) still fits a float32 and the
softmax's backward, p (dy - sum(dy p)), gives it back as exactly (p - 1) / total up to
rounding. A larger clip (1e-12, before) kept only p / 1e-12 of it: a confidently wrong
prediction (a logit 28 or more below the largest) stopped learning. Beyond a gap of about
87 (p below 1.18e-38, a subnormal or 0) the gradient still fades and each loss stops at 87.3;
FlexFlow and PyTorch, which take the gradient w.r.t. the softmax's input, do not."""


def sparse_categorical_crossentropy(
    probabilities: np.ndarray, labels: np.ndarray, total: int | None = None
) -> tuple[float, np.ndarray]:
    """Cross-entropy of softmax outputs (N, ..., classes) against integer labels (N, ...), one
    per prediction ((N,) or (N, 1) for (N, classes) outputs), averaged over the predictions."""
    shape = probabilities.shape
    labels = checked_labels(shape, labels).reshape(-1)
    rows = probabilities.reshape(-1, shape[-1])
    total = len(labels) if total is None else total
    picked = np.maximum(rows[np.arange(len(labels)), labels].astype(np.float64), SMALLEST_P)
    grad = np.zeros(rows.shape)
    grad[np.arange(len(labels)), labels] = -1.0 / (total * picked)
    return float(-np.sum(np.log(picked)) / total), grad.reshape(shape)


def categorical_crossentropy(
    probabilities: np.ndarray, target: np.ndarray, total: int | None = None
) -> tuple[float, np.ndarray]:
    """Cross-entropy of softmax outputs (N, ..., classes) against target distributions of the
    same shape (one-hot or soft labels), averaged over the predictions."""
    check_distributions(probabilities.shape, target)
    total = int(np.prod(probabilities.shape[:-1])) if total is None else total
    p = np.maximum(probabilities.astype(np.float64), SMALLEST_P)
    target = np.asarray(target, dtype=np.float64)
    return float(-np.sum(target * np.log(p)) / total), -target / (total * p)


def correct_predictions(prediction: np.ndarray, target: np.ndarray) -> int:
    """How many predictions' largest output (over the last dimension: one per sample of a
    (sample, classes) output, one per position of a (sample, position, classes) one) is their
    label, or the target's largest entry: the accuracy metric's numerator."""
    if prediction.ndim < 2 or prediction.shape[0] == 0:
        return 0
    guess = prediction.argmax(axis=-1)
    target = np.asarray(target)
    if target.shape == prediction.shape:  # distributions (or regression targets)
        truth = target.argmax(axis=-1)
    else:  # labels: (N,) or (N, 1) for a (N, classes) output
        truth = target.reshape(guess.shape)
    return int(np.sum(guess == truth))


def predictions_per_sample(output_shape: Shape) -> int:
    """Predictions one sample's output makes (what accuracy counts and the cross-entropies
    average over): one per position before the last (classes) dimension."""
    return int(np.prod(output_shape[1:-1], dtype=np.int64))


def sparse_tile(
    prediction: np.ndarray, labels, total: int, valid: int
) -> tuple[float, np.ndarray, int]:
    """`loss_tile` of sparse categorical cross-entropy on float32 outputs in one C pass
    (ops/native_sparse.py `sparse_xent`): the reference's float32 gradient and correct count (its
    loss to the last bits: another summation order and log)."""
    labels = shaped_labels(prediction.shape, labels)
    classes = prediction.shape[-1]
    per_sample = predictions_per_sample(prediction.shape)
    rows = prediction.reshape(-1, classes)  # (N * positions, classes)
    result = native_sparse.sparse_xent(rows, labels.reshape(-1), total, valid * per_sample)
    if result is None:  # a label out of range: the reference's error names them
        checked_labels(prediction.shape, labels)
        raise ShapeError(f"sparse_categorical_crossentropy: labels outside [0, {classes})")
    value, grad, correct = result
    return value, grad.reshape(prediction.shape), correct
