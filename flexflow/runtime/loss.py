"""Losses on the model's output (the value and its gradient with respect to that output) as one
table: what differs between the losses is one `LossKind` record each, in `KINDS`, whose fields
the target checks, the loss tasks, the metrics and compile's checks read rather than testing
names, so a new loss is one more record. The losses themselves, numpy functions of a tile of
the output, and the checks of their targets are in `flexflow.runtime.loss_functions`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexflow.data import check_finite
from flexflow.errors import FlexFlowError, ShapeError
from flexflow.graph import OperatorGraph
from flexflow.runtime.loss_functions import (
    SMALLEST_P,
    Shape,
    categorical_crossentropy,
    check_distributions,
    check_elementwise,
    check_identity_target,
    check_integer_labels,
    check_no_negatives,
    check_stored_label_range,
    checked_labels,
    correct_predictions,
    identity,
    mean_squared_error,
    predictions_per_sample,
    shaped_labels,
    sparse_categorical_crossentropy,
    sparse_tile,
)

Loss = Callable[..., tuple[float, np.ndarray]]
TargetCheck = Callable[[Shape, Any], None]
"""Raise ShapeError unless a target fits a loss for an output of the given shape."""
Tile = Callable[[np.ndarray, Any, int, int], tuple[float, np.ndarray, int]]
"""`loss_tile`'s (value, gradient, correct) from (prediction, target, total, valid)."""


@dataclass(frozen=True, slots=True)
class LossKind:
    """One loss: everything the code around it needs to know that differs between losses. The
    checks raise ShapeError naming the loss, what it got and the fix."""

    name: str
    forward: Loss
    """The loss's (value, gradient) on a tile of the output, given the whole batch's `total`."""
    target_rank: Callable[[int], int]
    """The rank of the target tile of an output tile of rank r: the same region, or for labels
    all but its classes."""
    divisor_per_sample: Callable[[Shape], int]
    """What the loss divides by per sample of an output of this shape: a loss task's `total`
    is that times the batch's valid samples."""
    check_target: TargetCheck
    """Checks a numpy target, for every batch: reads only what the loss itself reads."""
    check_store: TargetCheck | None = None
    """Checks a cuPyNumeric target without reading its data; None: its shape by
    `target_rank`, and integers where `integer_labels`."""
    check_stored_values: TargetCheck | None = None
    """Reads, by reductions, what `check_target` reads of a numpy target, in a cuPyNumeric
    one (once for a data set, before the first batch: a task would abort on it)."""
    check_values: TargetCheck | None = None
    """Reads a whole data set's targets (numpy or cuPyNumeric) once before the first batch:
    what no batch's check reads."""
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
        check_target=check_elementwise,
        aliases=("LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE", "mse"),
        metric_alias="METRICS_MEAN_SQUARED_ERROR",
    ),
    LossKind(
        "sparse_categorical_crossentropy",
        forward=sparse_categorical_crossentropy,
        target_rank=lambda output_rank: output_rank - 1,
        divisor_per_sample=predictions_per_sample,
        check_target=checked_labels,
        check_stored_values=check_stored_label_range,
        integer_labels=True,
        reads_probabilities=True,
        default_metrics=("accuracy",),
        float32_tile=sparse_tile,
        aliases=("LOSS_SPARSE_CATEGORICAL_CROSSENTROPY",),
        metric_alias="METRICS_SPARSE_CATEGORICAL_CROSSENTROPY",
    ),
    LossKind(
        "categorical_crossentropy",
        forward=categorical_crossentropy,
        target_rank=_same_rank,
        divisor_per_sample=predictions_per_sample,
        check_target=check_distributions,
        check_values=check_no_negatives,
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
        check_target=check_identity_target,
        check_store=check_identity_target,
        reads_targets=False,
        unscored_because="the model's output is its own loss, there are no predictions to score",
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
        check_integer_labels(name, np.dtype(target.dtype))


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


__all__ = [  # with the losses and label checks callers take from here, where they were
    "ALIASES",
    "KINDS",
    "LOSSES",
    "LOSS_IDS",
    "LOSS_KINDS",
    "LOSS_METRICS",
    "METRICS",
    "METRIC_ALIASES",
    "SMALLEST_P",
    "TARGET_RANK",
    "Loss",
    "LossKind",
    "categorical_crossentropy",
    "check_legate_target",
    "check_loss_input",
    "check_model_output",
    "check_target",
    "check_targets",
    "checked_labels",
    "correct_predictions",
    "ends_in_probabilities",
    "identity",
    "loss_kind",
    "loss_name",
    "loss_tile",
    "mean_squared_error",
    "metric_names",
    "predictions_per_sample",
    "shaped_labels",
    "sparse_categorical_crossentropy",
]
