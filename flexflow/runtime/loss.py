"""Losses on the model's output: the value and its gradient with respect to that output.

Each loss works on a tile of the output (and the matching tile of the target) given the size of
the whole (`total`: elements for MSE, predictions for cross-entropy), so tasks holding the
output's tiles each compute their share of the loss and their tile of its gradient.

The cross-entropies take outputs of any rank whose last dimension holds the classes: (sample,
classes), or (sample, position, classes) for a language model's per-token predictions, with
one label (or target distribution) per prediction, averaged over all of them as Keras does.

The identity loss (FlexFlow's LOSS_IDENTITY) takes the model's output as the loss: the model
computes its own loss in the graph, and its labels are ignored.

What differs between the losses is one `LossKind` record each, in `KINDS`: the code around
(target checks, the loss tasks, metrics, compile's checks) reads their fields rather than
testing names, so a new loss is one more record.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexflow.data import check_finite
from flexflow.errors import FlexFlowError, ShapeError
from flexflow.graph import OperatorGraph
from flexflow.ops import native_sparse

Loss = Callable[..., tuple[float, np.ndarray]]
Shape = tuple[int, ...]
TargetCheck = Callable[[Shape, Any], None]
"""Raise ShapeError unless a target fits a loss for an output of the given shape."""
Tile = Callable[[np.ndarray, Any, int, int], tuple[float, np.ndarray, int]]
"""`loss_tile`'s (value, gradient, correct) from (prediction, target, total, valid)."""


def _check_elementwise(output_shape: Shape, target) -> None:
    if tuple(output_shape) != np.shape(target):
        raise ShapeError(
            f"mean_squared_error: target shape {np.shape(target)} differs from the model's "
            f"output {tuple(output_shape)}; pass one target per output element."
        )


def _check_distributions(output_shape: Shape, target) -> None:
    if len(output_shape) < 2 or np.shape(target) != tuple(output_shape):
        raise ShapeError(
            f"categorical_crossentropy: expects (sample, ..., classes) probabilities and a "
            f"target of the same shape, got output {tuple(output_shape)} and target "
            f"{np.shape(target)}."
        )


def _check_integer_labels(name: str, dtype: np.dtype) -> None:
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
    _check_integer_labels("sparse_categorical_crossentropy", labels.dtype)
    return labels


def checked_labels(output_shape: Shape, labels) -> np.ndarray:
    """`shaped_labels`, each a class of the output's last dimension."""
    labels = shaped_labels(output_shape, labels)
    if labels.size:
        _check_label_range(output_shape[-1], labels.min(), labels.max())
    return labels


def _check_stored_label_range(output_shape: Shape, labels) -> None:
    """`checked_labels`' range check on a cuPyNumeric store, by reductions (its shape and type
    are known to fit): a task would abort on a label out of range."""
    if output_shape[0]:
        _check_label_range(output_shape[-1], int(labels.min()), int(labels.max()))


def _check_no_negatives(output_shape: Shape, target) -> None:
    """Probabilities are not negative (checked once for a data set: it reads all of them)."""
    if target.size and float(target.min()) < 0:
        negative = np.asarray((target < 0).reshape(len(target), -1).any(axis=1))
        raise ShapeError(
            f"categorical_crossentropy: targets are probabilities (one-hot, or rows summing "
            f"to 1), got negative ones (the first in sample {int(np.argmax(negative))}); for "
            "class indices use sparse_categorical_crossentropy."
        )


def _check_identity_target(output_shape: Shape, target) -> None:
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


def predictions_per_sample(output_shape: Shape) -> int:
    """Predictions one sample's output makes (what accuracy counts and the cross-entropies
    average over): one per position before the last (classes) dimension."""
    return int(np.prod(output_shape[1:-1], dtype=np.int64))


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


@dataclass(frozen=True, slots=True)
class LossKind:
    """One loss: everything the code around it needs to know that differs between losses.

    `forward` is the loss's (value, gradient) on a tile; `target_rank(r)` the rank of the
    target tile of an output tile of rank r (the same region, or for labels all but its
    classes); `divisor_per_sample(shape)` what the loss divides by per sample of a batch's
    output of `shape` (a loss task's `total` is that times the valid samples). The checks
    raise ShapeError naming the loss and the fix: `check_target` a numpy target (for every
    batch, so it reads only what the loss itself reads); `check_store` a cuPyNumeric one
    without reading its data (None: its shape by `target_rank`, and integers where
    `integer_labels`); `check_stored_values` reads, by reductions, what `check_target` reads
    on numpy; `check_values` reads a whole data set once before the first batch (numpy or
    cuPyNumeric), what no batch check reads."""

    name: str
    forward: Loss
    target_rank: Callable[[int], int]
    divisor_per_sample: Callable[[Shape], int]
    check_target: TargetCheck
    check_store: TargetCheck | None = None
    check_stored_values: TargetCheck | None = None
    check_values: TargetCheck | None = None
    integer_labels: bool = False
    """The targets are class indices (messages call them labels)."""
    reads_targets: bool = True
    """False: the targets are never read (so NaN ones are not refused)."""
    reads_probabilities: bool = False
    """The loss reads a softmax's output over the last axis (`check_loss_input`)."""
    unscored_because: str | None = None
    """Why accuracy cannot score this loss's output, or None where it can."""
    default_metrics: tuple[str, ...] = ()
    """The metrics `compile` computes when given none."""
    float32_tile: Tile | None = None
    """`loss_tile` on float32 outputs in one C pass, where a loss has one."""
    aliases: tuple[str, ...] = ()
    """Other names `compile` takes for it (FlexFlow's LossType names)."""
    metric_alias: str | None = None
    """FlexFlow's MetricsType name for it: as a metric, the loss every epoch reports."""

    @property
    def scores_predictions(self) -> bool:
        """Whether the output is predictions accuracy counts (`correct_predictions`)."""
        return self.unscored_because is None


def _same_rank(output_rank: int) -> int:
    return output_rank


def _elements_per_sample(output_shape: Shape) -> int:
    return int(np.prod(output_shape[1:]))


KINDS: tuple[LossKind, ...] = (
    LossKind(
        "mean_squared_error",
        forward=mean_squared_error,
        target_rank=_same_rank,
        divisor_per_sample=_elements_per_sample,
        check_target=_check_elementwise,
        aliases=("LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE", "mse"),
        metric_alias="METRICS_MEAN_SQUARED_ERROR",
    ),
    LossKind(
        "sparse_categorical_crossentropy",
        forward=sparse_categorical_crossentropy,
        target_rank=lambda output_rank: output_rank - 1,
        divisor_per_sample=predictions_per_sample,
        check_target=checked_labels,
        check_stored_values=_check_stored_label_range,
        integer_labels=True,
        reads_probabilities=True,
        default_metrics=("accuracy",),
        float32_tile=_sparse_tile,
        aliases=("LOSS_SPARSE_CATEGORICAL_CROSSENTROPY",),
        metric_alias="METRICS_SPARSE_CATEGORICAL_CROSSENTROPY",
    ),
    LossKind(
        "categorical_crossentropy",
        forward=categorical_crossentropy,
        target_rank=_same_rank,
        divisor_per_sample=predictions_per_sample,
        check_target=_check_distributions,
        check_values=_check_no_negatives,
        reads_probabilities=True,
        default_metrics=("accuracy",),
        aliases=("LOSS_CATEGORICAL_CROSSENTROPY",),
        metric_alias="METRICS_CATEGORICAL_CROSSENTROPY",
    ),
    LossKind(
        "identity",
        forward=identity,
        target_rank=lambda output_rank: 1,  # ignored: its samples only
        divisor_per_sample=lambda output_shape: 1,  # the mean of the samples' summed outputs
        check_target=_check_identity_target,
        check_store=_check_identity_target,
        reads_targets=False,
        unscored_because=("the model's output is its own loss, there are no predictions to score"),
        aliases=("LOSS_IDENTITY",),
    ),
)
"""The losses, in the order of the integer id a loss task receives as a scalar."""

LOSS_KINDS: dict[str, LossKind] = {kind.name: kind for kind in KINDS}
LOSSES: dict[str, Loss] = {kind.name: kind.forward for kind in KINDS}
TARGET_RANK: dict[str, Callable[[int], int]] = {kind.name: kind.target_rank for kind in KINDS}
ALIASES: dict[str, str] = {alias: kind.name for kind in KINDS for alias in kind.aliases}
LOSS_IDS: tuple[str, ...] = tuple(LOSS_KINDS)
"""Losses by the integer id a loss task receives as a scalar."""


def loss_name(name: str) -> str:
    """The loss's name in LOSSES, from itself or one of FlexFlow's LossType names."""
    name = getattr(name, "name", name)  # an enum member
    name = ALIASES.get(name, name)
    if name not in LOSSES:
        raise ShapeError(f"unknown loss '{name}'; choose one of {', '.join(LOSSES)}.")
    return name


def loss_kind(name: str) -> LossKind:
    """The record of the loss named `name` (any name `loss_name` takes)."""
    return LOSS_KINDS[loss_name(name)]


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
    kind, last = loss_kind(loss), graph.ops[-1]
    if kind.reads_probabilities and not ends_in_probabilities(graph):
        rank = len(last.sig.output_shape)
        got = (
            f"a softmax over axis {last.op.axis % rank}"
            if last.kind == "softmax"
            else f"{last.kind} '{last.name}'"
        )
        raise ShapeError(
            f"{kind.name} reads probabilities over the last axis (a softmax's), but the model "
            f"ends in {got} (output {last.sig.output_shape}): end the model with "
            "model.softmax(x) (axis -1), or train with mean_squared_error."
        )


def check_target(name: str, output_shape: Shape, target: np.ndarray) -> None:
    """Raise ShapeError unless `target` fits the loss `name` for an output of `output_shape`:
    the losses' own checks, without an output-sized array (this runs for every batch)."""
    if name not in LOSS_KINDS:
        raise ShapeError(f"unknown loss '{name}'; choose one of {', '.join(LOSSES)}.")
    LOSS_KINDS[name].check_target(output_shape, target)


def check_legate_target(name: str, output_shape: Shape, target) -> None:
    """Raise ShapeError unless a cuPyNumeric `target` has the shape and type the loss `name`
    takes for an output of `output_shape`, without reading its data."""
    kind = LOSS_KINDS[name]
    if kind.check_store is not None:
        kind.check_store(output_shape, target)
        return
    expected = output_shape[: kind.target_rank(len(output_shape))]
    if tuple(target.shape) != expected:
        raise ShapeError(f"{name}: target shape {tuple(target.shape)}, expected {expected}.")
    if kind.integer_labels:
        _check_integer_labels(name, np.dtype(target.dtype))


def check_targets(loss: str, output_shape: Shape, target, samples: int) -> None:
    """Raise ShapeError unless a data set's `target` (numpy or cuPyNumeric, one entry per
    sample) fits the loss `loss` for a model whose output has `output_shape` (batch first):
    checked once for all of it before the first batch, so a bad label at the end of the data
    is not found after an epoch of training, and a cuPyNumeric target of the wrong type never
    reaches a task (float labels there aborted the process)."""
    kind = loss_kind(loss)
    name = kind.name
    if target is None:
        raise ShapeError(
            f"{name}: no targets given (y is None); pass y with one "
            f"{'label' if kind.integer_labels else 'target'} per sample of x."
        )
    shape = (samples, *output_shape[1:])
    in_legate = hasattr(target, "__legate_data_interface__")
    if in_legate:  # read by reductions here: a task would abort on a bad label
        check_legate_target(name, shape, target)
    else:
        target = np.asarray(target)
        check_target(name, shape, target)
    if kind.reads_targets:
        check_finite(f"{name}: y", target)
    if kind.check_values is not None:
        kind.check_values(shape, target)
    if in_legate and kind.check_stored_values is not None:
        kind.check_stored_values(shape, target)


def loss_tile(
    loss_id: int, prediction: np.ndarray, target: np.ndarray, total: int, valid: int
) -> tuple[float, np.ndarray, int]:
    """One loss task's share: the loss summed over this tile's first `valid` samples (the rest
    pad the last batch of an evaluation) and divided by `total`, the gradient (zero for the
    padding) and how many of those samples were predicted right."""
    rows = prediction.shape[0]
    valid = max(0, min(valid, rows))
    kind = KINDS[loss_id]
    if kind.float32_tile is not None and prediction.dtype == np.float32:
        return kind.float32_tile(prediction, target, total, valid)
    grad = np.zeros(prediction.shape)
    if valid == 0:
        return 0.0, grad, 0
    value, grad[:valid] = kind.forward(prediction[:valid], target[:valid], total)
    if not kind.scores_predictions:  # no predictions to count (accuracy is refused)
        return value, grad, 0
    return value, grad, correct_predictions(prediction[:valid], target[:valid])


METRICS = ("accuracy",)
METRIC_ALIASES = {"METRICS_ACCURACY": "accuracy"}
LOSS_METRICS = {
    # FlexFlow's MetricsType names of losses: the loss trained on is every epoch's `loss`
    kind.metric_alias: kind.name
    for kind in KINDS
    if kind.metric_alias is not None
}


def metric_names(metrics: Sequence[str], loss: str) -> tuple[str, ...]:
    """The metrics to compute, by their names here: FlexFlow's names are taken, and a loss
    named as a metric is the loss `loss` trained on (every epoch reports it), or refused."""
    if isinstance(metrics, str) or hasattr(metrics, "name"):  # one metric: not its letters
        metrics = (metrics,)
    kind = LOSS_KINDS.get(loss)
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
        if kind is not None and not kind.scores_predictions:
            raise FlexFlowError(
                f"metric '{name}' does not apply to the {loss} loss ({kind.unscored_because}); "
                "drop the metric: every epoch reports the loss."
            )
        names.append(name)
    return tuple(names)
