"""FlexFlow's Keras losses: each names the loss `flexflow.core` compiles with (`type`)."""

from __future__ import annotations

from typing import Any

from flexflow.errors import FlexFlowError


class Loss:
    """A loss; `type` is its name in `flexflow.runtime.loss.LOSSES`."""

    type = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CategoricalCrossentropy(Loss):
    type = "categorical_crossentropy"


class SparseCategoricalCrossentropy(Loss):
    type = "sparse_categorical_crossentropy"


class MeanSquaredError(Loss):
    type = "mean_squared_error"


class Identity(Loss):
    """FlexFlow's identity loss: the model's output is its loss (the mean over the samples of
    each one's output summed), the labels are ignored (`flexflow.runtime.loss.identity`)."""

    type = "identity"


NAMES: dict[str, type[Loss]] = {
    "categorical_crossentropy": CategoricalCrossentropy,
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "mean_squared_error": MeanSquaredError,
    "mse": MeanSquaredError,
    "identity": Identity,
}


def get(value: Any) -> Loss:
    """A loss from an object or Keras' name."""
    loss = NAMES[value]() if isinstance(value, str) and value in NAMES else value
    if not isinstance(loss, Loss):
        choices = ", ".join(NAMES)
        raise FlexFlowError(f"compile: unknown loss {value!r}; choose one of {choices}.")
    return loss


__all__ = [
    "CategoricalCrossentropy",
    "Identity",
    "Loss",
    "MeanSquaredError",
    "SparseCategoricalCrossentropy",
    "get",
]
