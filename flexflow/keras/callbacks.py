"""FlexFlow's Keras callbacks: the `Callback` hooks a model's fit calls around each epoch,
`LearningRateScheduler`, and FlexFlow's `VerifyMetrics` (fails the run when the final
accuracy is below a threshold) and `EpochVerifyMetrics` (stops training early once an
epoch's accuracy is above it). Thresholds are percentages, or FlexFlow's `ModelAccuracy`
enum members (their `.value`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from numbers import Real
from typing import Any

from flexflow.errors import FlexFlowError

_log = logging.getLogger(__name__)


class Callback:
    """Hooks around training. fit calls on_train_begin/end and on_epoch_begin/end; an
    on_epoch_end that returns True (FlexFlow's early stop) or sets `self.model.stop_training`
    (Keras') stops training after that epoch.
    on_batch_begin/end are not called: an epoch runs as one call of this package's fit, so
    a callback that defines them is refused by fit."""

    def __init__(self) -> None:
        self.model: Any = None
        self.params: dict[str, Any] = {}
        self.validation_data = None

    def set_params(self, params: dict[str, Any]) -> None:
        self.params = params

    def set_model(self, model: Any) -> None:
        self.model = model

    def on_train_begin(self, logs: dict | None = None) -> None: ...

    def on_train_end(self, logs: dict | None = None) -> None: ...

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None: ...

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> bool | None: ...

    def on_batch_begin(self, batch: int, logs: dict | None = None) -> None: ...

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None: ...


def threshold(accuracy: Any) -> float:
    """A percentage from a number or a `ModelAccuracy` member."""
    value = getattr(accuracy, "value", accuracy)
    if not isinstance(value, Real) or isinstance(value, bool):
        raise FlexFlowError(
            f"an accuracy threshold is a percentage (e.g. 90) or a ModelAccuracy member, got "
            f"{accuracy!r}."
        )
    return float(value)


class LearningRateScheduler(Callback):
    """Sets the optimizer's learning rate to `schedule(epoch)` before each epoch."""

    def __init__(self, schedule: Callable[[int], float]) -> None:
        super().__init__()
        self.schedule = schedule

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        rate = self.schedule(epoch)
        if not isinstance(rate, Real) or isinstance(rate, bool):
            raise FlexFlowError(
                f"LearningRateScheduler: schedule({epoch}) returned {rate!r}; it must return "
                "a float learning rate."
            )
        self.model.optimizer.set_learning_rate(float(rate))  # the model it is compiled into
        _log.info("epoch %d: learning rate %g", epoch, rate)


class VerifyMetrics(Callback):
    """Fails the run at the end of training when the last epoch's accuracy (percent) is
    below `accuracy`, as FlexFlow's does (its examples' ModelAccuracy: 90)."""

    def __init__(self, accuracy: Any) -> None:
        super().__init__()
        self.accuracy = threshold(accuracy)

    def on_train_end(self, logs: dict | None = None) -> None:
        reached = self.model.ffmodel.get_perf_metrics().get_accuracy()
        if reached < self.accuracy:
            raise FlexFlowError(
                f"VerifyMetrics: accuracy {reached:.2f}% after training is below "
                f"{self.accuracy:g}%; train longer, or pass a lower threshold."
            )


class EpochVerifyMetrics(Callback):
    """Stops training after the first epoch whose accuracy (percent) is above `accuracy`
    (with `early_stop`), as FlexFlow's does."""

    def __init__(self, accuracy: Any, early_stop: bool = True) -> None:
        super().__init__()
        self.accuracy = threshold(accuracy)
        self.early_stop = early_stop

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> bool:
        if not self.early_stop:
            return False
        return self.model.ffmodel.get_perf_metrics().get_accuracy() > self.accuracy


__all__ = [
    "Callback",
    "EpochVerifyMetrics",
    "LearningRateScheduler",
    "VerifyMetrics",
]
