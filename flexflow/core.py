"""FlexFlow's Python names, for scripts written against FlexFlow (`from flexflow.core import *`).

FlexFlow's examples start with that import, read their settings with `FFConfig()` (the
command line's -b, -e, --lr, ...), build optimizers from the model (`SGDOptimizer(ffmodel,
0.01)`, its hyperparameters in FlexFlow's order) and name losses and metrics by enums. This
module gives those names over this package's API, so such a script runs with few changes
(README "Porting a FlexFlow script" says which). Code written for this package uses
`flexflow`, `flexflow.optimizers` and strings instead.
"""

from __future__ import annotations

import enum

from flexflow import ActiMode, AggrMode, DataType, FFModel, PoolType
from flexflow.config import FFConfig as _FFConfig
from flexflow.optimizers import AdamOptimizer as _Adam
from flexflow.optimizers import SGDOptimizer as _SGD


class LossType(enum.Enum):
    """FlexFlow's loss names (`compile(loss_type=LossType...)`)."""

    LOSS_CATEGORICAL_CROSSENTROPY = "categorical_crossentropy"
    LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = "sparse_categorical_crossentropy"
    LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE = "mean_squared_error"


class MetricsType(enum.Enum):
    """FlexFlow's metric names; a loss named as a metric is the loss every epoch reports."""

    METRICS_ACCURACY = "accuracy"
    METRICS_CATEGORICAL_CROSSENTROPY = "categorical_crossentropy"
    METRICS_SPARSE_CATEGORICAL_CROSSENTROPY = "sparse_categorical_crossentropy"
    METRICS_MEAN_SQUARED_ERROR = "mean_squared_error"


def FFConfig() -> _FFConfig:  # noqa: N802 (FlexFlow's constructor)
    """FlexFlow's `FFConfig()`: the training settings from this process's command line
    (`flexflow.config.FFConfig.from_args`: -b, -e, --lr, --seed, --budget, --import, ...)."""
    return _FFConfig.from_args()


def SGDOptimizer(  # noqa: N802 (FlexFlow's constructor)
    ffmodel: FFModel | None = None,
    lr: float = 0.01,
    momentum: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
) -> _SGD:
    """FlexFlow's `SGDOptimizer(ffmodel, lr, momentum, nesterov, weight_decay)`; the model is
    not needed (`model.optimizer = ...` or `compile(optimizer)` gives it to one)."""
    return _SGD(lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)


def AdamOptimizer(  # noqa: N802 (FlexFlow's constructor)
    ffmodel: FFModel | None = None,
    alpha: float = 0.001,
    beta1: float = 0.9,
    beta2: float = 0.999,
    weight_decay: float = 0.0,
    epsilon: float = 1e-8,
) -> _Adam:
    """FlexFlow's `AdamOptimizer(ffmodel, alpha, beta1, beta2, weight_decay, epsilon)` (the
    order differs from `flexflow.optimizers.AdamOptimizer`'s keywords); the model is not needed."""
    return _Adam(alpha, beta1=beta1, beta2=beta2, weight_decay=weight_decay, epsilon=epsilon)


__all__ = [
    "ActiMode",
    "AdamOptimizer",
    "AggrMode",
    "DataType",
    "FFConfig",
    "FFModel",
    "LossType",
    "MetricsType",
    "PoolType",
    "SGDOptimizer",
]
