"""Losses on the model's output: the value and its gradient with respect to that output.

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

from collections.abc import Callable, Sequence

import numpy as np

from flexflow.data import check_finite
from flexflow.errors import FlexFlowError, ShapeError
from flexflow.graph import OperatorGraph
from flexflow.ops import native_sparse

Loss = Callable[..., tuple[float, np.ndarray]]


def _check_elementwise(output_shape: tuple[int, ...], target) -> None:
    if tuple(output_shape) != np.shape(target):
        raise ShapeError(
            f"mean_squared_error: target shape {np.shape(target)} differs from the model's "
            f"output {tuple(output_shape)}; pass one target per output element."
        )


def _check_distributions(output_shape: tuple[int, ...], target) -> None:
    if len(output_shape) < 2 or np.shape(target) != tuple(output_shape):
        raise ShapeError(
            f"categorical_crossentropy: expects (sample, ..., classes) probabilities and a "
            f"target of the same shape, got output {tuple(output_shape)} and target "
            f"{np.shape(target)}."
        )


def shaped_labels(output_shape: tuple[int, ...], labels) -> np.ndarray:
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
    if labels.dtype.kind not in "iu":
        raise ShapeError(
            f"sparse_categorical_crossentropy: labels must be integers (class indices), got "
            f"{labels.dtype}; pass labels.astype(int), or one-hot targets with "
            f"categorical_crossentropy."
        )
    return labels


def checked_labels(output_shape: tuple[int, ...], labels) -> np.ndarray:
    """`shaped_labels`, each a class of the output's last dimension."""
    labels = shaped_labels(output_shape, labels)
    if labels.size and (labels.min() < 0 or labels.max() >= output_shape[-1]):
        raise ShapeError(
            f"sparse_categorical_crossentropy: labels must lie in [0, {output_shape[-1]}), "
            f"got [{labels.min()}, {labels.max()}]."
        )
    return labels


def mean_squared_error(
    prediction: np.ndarray, target: np.ndarray, total: int | None = None
) -> tuple[float, np.ndarray]:
    _check_elementwise(prediction.shape, target)
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


def _check_identity_target(output_shape: tuple[int, ...], target) -> None:
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
    _check_distributions(probabilities.shape, target)
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


def predictions_per_sample(output_shape: tuple[int, ...]) -> int:
    """Predictions one sample's output makes (what accuracy counts and the cross-entropies
    average over): one per position before the last (classes) dimension."""
    return int(np.prod(output_shape[1:-1], dtype=np.int64))


LOSSES: dict[str, Loss] = {
    "mean_squared_error": mean_squared_error,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "identity": identity,
}

TARGET_RANK: dict[str, Callable[[int], int]] = {
    # the target tile of an output tile: the same region, or for labels all but its classes
    "mean_squared_error": lambda output_rank: output_rank,
    "sparse_categorical_crossentropy": lambda output_rank: output_rank - 1,
    "categorical_crossentropy": lambda output_rank: output_rank,
    "identity": lambda output_rank: 1,  # ignored: its samples only
}

ALIASES = {
    # FlexFlow's LossType names
    "LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE": "mean_squared_error",
    "LOSS_SPARSE_CATEGORICAL_CROSSENTROPY": "sparse_categorical_crossentropy",
    "LOSS_CATEGORICAL_CROSSENTROPY": "categorical_crossentropy",
    "LOSS_IDENTITY": "identity",
    "mse": "mean_squared_error",
}


def loss_name(name: str) -> str:
    """The loss's name in LOSSES, from itself or one of FlexFlow's LossType names."""
    name = getattr(name, "name", name)  # an enum member
    name = ALIASES.get(name, name)
    if name not in LOSSES:
        raise ShapeError(f"unknown loss '{name}'; choose one of {', '.join(LOSSES)}.")
    return name


def check_model_output(graph: OperatorGraph, loss: str) -> None:
    """Raise ShapeError unless the loss `loss` can train `graph`: the loss reads the last op
    added, so every other op's output must be read by some op (else that op is trained by
    nothing, and the loss may read an op meant as a side branch); every input is read."""
    loss_name(loss)
    last = graph.ops[-1]
    unread = [n for n in graph.ops[:-1] if not any(graph.consumers(t) for t in n.outputs)]
    if unread:
        names = ", ".join(f"{n.kind} '{n.name}'" for n in unread[:4])
        raise ShapeError(
            f"nothing reads the output of {names}{' ...' if len(unread) > 4 else ''}; the loss "
            f"reads the last layer added ({last.kind} '{last.name}'), so nothing would train "
            f"{'them' if len(unread) > 1 else 'it'}: add the model's output layer last and "
            "remove the layers nothing reads."
        )
    unfed = [t for t in graph.input_tensors if not graph.consumers(t.id)]
    if unfed:
        listed = ", ".join(f"'{t.name}' {t.spec.shape}" for t in unfed)
        raise ShapeError(
            f"no layer reads the model input {listed}; remove it (labels go to fit's y, not "
            "to create_tensor)."
        )


def ends_in_probabilities(graph: OperatorGraph) -> bool:
    """Whether the model ends in a softmax over its last axis: the probabilities a
    cross-entropy reads (`check_loss_input`)."""
    last = graph.ops[-1]
    rank = len(last.sig.output_shape)
    return last.kind == "softmax" and last.op.axis % rank == rank - 1


def check_loss_input(graph: OperatorGraph, loss: str) -> None:
    """Raise ShapeError unless `loss` can read the model's output: a cross-entropy reads
    probabilities over the last axis, a softmax's (whose backward then turns the loss's
    gradient into the logits', `SMALLEST_P`)."""
    name, last = loss_name(loss), graph.ops[-1]
    if "crossentropy" in name and not ends_in_probabilities(graph):
        rank = len(last.sig.output_shape)
        got = (
            f"a softmax over axis {last.op.axis % rank}"
            if last.kind == "softmax"
            else f"{last.kind} '{last.name}'"
        )
        raise ShapeError(
            f"{name} reads probabilities over the last axis (a softmax's), but the model "
            f"ends in {got} (output {last.sig.output_shape}): end the model with "
            "model.softmax(x) (axis -1), or train with mean_squared_error."
        )


def check_target(name: str, output_shape: tuple[int, ...], target: np.ndarray) -> None:
    """Raise ShapeError unless `target` fits the loss `name` for an output of `output_shape`:
    the losses' own checks, without an output-sized array (this runs for every batch)."""
    if name not in LOSSES:
        raise ShapeError(f"unknown loss '{name}'; choose one of {', '.join(LOSSES)}.")
    if name == "categorical_crossentropy":
        _check_distributions(output_shape, target)
    elif name == "sparse_categorical_crossentropy":
        checked_labels(output_shape, target)
    elif name == "identity":
        _check_identity_target(output_shape, target)
    else:
        _check_elementwise(output_shape, target)


def check_targets(loss: str, output_shape: tuple[int, ...], target, samples: int) -> None:
    """Raise ShapeError unless a data set's `target` (numpy or cuPyNumeric, one entry per
    sample) fits the loss `loss` for a model whose output has `output_shape` (batch first):
    checked once for all of it before the first batch, so a bad label at the end of the data
    is not found after an epoch of training, and a cuPyNumeric target of the wrong type never
    reaches a task (float labels there aborted the process)."""
    name = loss_name(loss)
    if target is None:
        raise ShapeError(
            f"{name}: no targets given (y is None); pass y with one "
            f"{'label' if name == 'sparse_categorical_crossentropy' else 'target'} per sample "
            "of x."
        )
    shape = (samples, *output_shape[1:])
    in_legate = hasattr(target, "__legate_data_interface__")
    if in_legate:  # read by reductions here: a task would abort on a bad label
        check_legate_target(name, shape, target)
    else:
        target = np.asarray(target)
        check_target(name, shape, target)
    if name != "identity":  # its targets are never read
        check_finite(f"{name}: y", target)
    if name == "categorical_crossentropy" and target.size and float(target.min()) < 0:
        negative = np.asarray((target < 0).reshape(len(target), -1).any(axis=1))
        raise ShapeError(
            f"categorical_crossentropy: targets are probabilities (one-hot, or rows summing "
            f"to 1), got negative ones (the first in sample {int(np.argmax(negative))}); for "
            "class indices use sparse_categorical_crossentropy."
        )
    if in_legate and name == "sparse_categorical_crossentropy" and samples:
        low, high = int(target.min()), int(target.max())
        if low < 0 or high >= shape[-1]:
            raise ShapeError(
                f"sparse_categorical_crossentropy: labels must lie in [0, {shape[-1]}), got "
                f"[{low}, {high}]."
            )


def check_legate_target(name: str, output_shape: tuple[int, ...], target) -> None:
    """Raise ShapeError unless a cuPyNumeric `target` has the shape and type the loss `name`
    takes for an output of `output_shape`, without reading its data."""
    if name == "identity":
        _check_identity_target(output_shape, target)
        return
    expected = output_shape[: TARGET_RANK[name](len(output_shape))]
    if tuple(target.shape) != expected:
        raise ShapeError(f"{name}: target shape {tuple(target.shape)}, expected {expected}.")
    if name == "sparse_categorical_crossentropy" and np.dtype(target.dtype).kind not in "iu":
        raise ShapeError(
            f"sparse_categorical_crossentropy: labels must be integers (class indices), got "
            f"{np.dtype(target.dtype)}; pass labels.astype(int), or one-hot targets with "
            f"categorical_crossentropy."
        )


LOSS_IDS: tuple[str, ...] = tuple(LOSSES)
"""Losses by the integer id a loss task receives as a scalar."""


def loss_tile(
    loss_id: int, prediction: np.ndarray, target: np.ndarray, total: int, valid: int
) -> tuple[float, np.ndarray, int]:
    """One loss task's share: the loss summed over this tile's first `valid` samples (the rest
    pad the last batch of an evaluation) and divided by `total`, the gradient (zero for the
    padding) and how many of those samples were predicted right."""
    rows = prediction.shape[0]
    valid = max(0, min(valid, rows))
    if LOSS_IDS[loss_id] == "sparse_categorical_crossentropy" and prediction.dtype == np.float32:
        return _sparse_tile(prediction, target, total, valid)
    grad = np.zeros(prediction.shape)
    if valid == 0:
        return 0.0, grad, 0
    name = LOSS_IDS[loss_id]
    value, grad[:valid] = LOSSES[name](prediction[:valid], target[:valid], total)
    if name == "identity":  # no predictions to count (accuracy is refused)
        return value, grad, 0
    return value, grad, correct_predictions(prediction[:valid], target[:valid])


def _sparse_tile(
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


METRICS = ("accuracy",)
METRIC_ALIASES = {"METRICS_ACCURACY": "accuracy"}
LOSS_METRICS = {
    # FlexFlow's MetricsType names of losses: the loss trained on is every epoch's `loss`
    "METRICS_SPARSE_CATEGORICAL_CROSSENTROPY": "sparse_categorical_crossentropy",
    "METRICS_CATEGORICAL_CROSSENTROPY": "categorical_crossentropy",
    "METRICS_MEAN_SQUARED_ERROR": "mean_squared_error",
}


def metric_names(metrics: Sequence[str], loss: str) -> tuple[str, ...]:
    """The metrics to compute, by their names here: FlexFlow's names are taken, and a loss
    named as a metric is the loss `loss` trained on (every epoch reports it), or refused."""
    if isinstance(metrics, str) or hasattr(metrics, "name"):  # one metric: not its letters
        metrics = (metrics,)
    names = []
    for metric in metrics:
        name = getattr(metric, "name", metric)
        name = METRIC_ALIASES.get(name, name)
        if not isinstance(name, str):
            raise FlexFlowError(f"a metric is a name such as 'accuracy', got {metric!r}.")
        as_loss = LOSS_METRICS.get(name, name)
        if as_loss == loss:  # reported as the loss
            continue
        if as_loss in LOSS_METRICS.values():
            raise FlexFlowError(
                f"metric '{name}' is a loss; this model trains on {loss}, which every epoch "
                f"reports as its loss; drop the metric or compile with loss_type='{as_loss}'."
            )
        if name not in METRICS:
            raise FlexFlowError(f"unknown metric '{name}'; choose from {', '.join(METRICS)}.")
        if loss == "identity":  # the output is a loss, not predictions of a class
            raise FlexFlowError(
                f"metric '{name}' does not apply to the identity loss (the model's output is "
                "its own loss, there are no predictions to score); drop the metric: every "
                "epoch reports the loss."
            )
        names.append(name)
    return tuple(names)
