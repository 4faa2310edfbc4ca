"""FlexFlow's Keras metrics: each names the metric `flexflow.core` compiles with (`type`, a
FlexFlow MetricsType name); a loss named as a metric is the loss every epoch reports.
Root-mean-squared and mean-absolute errors are refused (not computed here)."""

from __future__ import annotations

from typing import Any

from flexflow.errors import FlexFlowError, NotOfferedError


class Metric:
    type: str | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Accuracy(Metric):
    type = "METRICS_ACCURACY"


class CategoricalCrossentropy(Metric):
    type = "METRICS_CATEGORICAL_CROSSENTROPY"


class SparseCategoricalCrossentropy(Metric):
    type = "METRICS_SPARSE_CATEGORICAL_CROSSENTROPY"


class MeanSquaredError(Metric):
    type = "METRICS_MEAN_SQUARED_ERROR"


class RootMeanSquaredError(Metric):
    """Refused when compiled (not computed here)."""


class MeanAbsoluteError(Metric):
    """Refused when compiled (not computed here)."""


NAMES: dict[str, type[Metric]] = {
    "accuracy": Accuracy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "mean_squared_error": MeanSquaredError,
    "root_mean_squared_error": RootMeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError,
}


def get(value: Any) -> Metric:
    """A metric from an object or Keras' name."""
    metric = NAMES[value]() if isinstance(value, str) and value in NAMES else value
    if not isinstance(metric, Metric):
        raise FlexFlowError(f"compile: unknown metric {value!r}; choose from {', '.join(NAMES)}.")
    if metric.type is None:
        raise NotOfferedError(
            f"compile: metric {type(metric).__name__} is not offered; flexflow computes "
            "accuracy (under the cross-entropies and mean squared error) and reports the loss "
            "it trains on each epoch: drop the metric (under the identity loss, any metric)."
        )
    return metric


__all__ = [
    "Accuracy",
    "CategoricalCrossentropy",
    "MeanAbsoluteError",
    "MeanSquaredError",
    "Metric",
    "RootMeanSquaredError",
    "SparseCategoricalCrossentropy",
    "get",
]
