"""flexflow.keras' BatchNormalization over channels (`batch_norm`, without a ReLU after it:
FlexFlow's Keras layer calls FlexFlow's batch_norm whose default adds one, Keras' has none)."""

from __future__ import annotations

from typing import Any

from flexflow.errors import NotOfferedError
from flexflow.keras.layers.base import Layer
from flexflow.layers import LayerAPI, Tensor


class BatchNormalization(Layer):
    kind, default_name = "BatchNormalization", "batch_norm"

    def __init__(self, axis: int = 1, **keywords: Any) -> None:
        super().__init__(**keywords)
        if axis != 1:
            raise NotOfferedError(
                f"BatchNormalization '{self.name}': axis={axis} is not offered; channels are "
                "axis 1 (channels_first) here."
            )

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return api.batch_norm(inputs[0], False, name=self.name)


__all__ = ["BatchNormalization"]
