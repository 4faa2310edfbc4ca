"""flexflow.keras' 2-D pooling (MaxPooling2D, AveragePooling2D) mapped onto `pool2d`."""

from __future__ import annotations

from typing import Any

from flexflow.errors import NotOfferedError, ShapeError
from flexflow.keras.layers.base import Layer, pair
from flexflow.keras.layers.convolutional import padding_of
from flexflow.layers import LayerAPI, Tensor
from flexflow.ops.pool2d import PoolType


class Pooling2D(Layer):
    """Pooling over windows of `pool_size` every `strides` (default: `pool_size`); padded cells
    never count (a max ignores them, an average divides by the window's cells inside the
    image), as in Keras."""

    kind, default_name, pool_type = "Pooling2D", "pool2d", PoolType.POOL_MAX

    def __init__(
        self,
        pool_size: Any = (2, 2),
        strides: Any = None,
        padding: Any = "valid",
        data_format: str | None = None,
        **keywords: Any,
    ) -> None:
        super().__init__(**keywords)
        if data_format not in (None, "channels_first"):
            raise NotOfferedError(
                f"{self.kind} '{self.name}': data_format={data_format!r} is not offered; "
                "images are channels_first as in FlexFlow."
            )
        self.pool_size = pair(self, "pool_size", pool_size)
        self.strides = self.pool_size if strides is None else pair(self, "strides", strides)
        if padding not in ("valid", "same"):
            pair(self, "padding", padding)
        self.padding = padding

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        x = inputs[0]
        if len(x.shape) != 4:
            raise ShapeError(
                f"{self.kind} takes (sample, channel, height, width) images, got shape "
                f"{x.shape}; reshape the input to channels-first images."
            )
        # pool2d's average leaves padded cells out of its divisor, as Keras' 'same' does
        pad = padding_of(self, self.padding, self.pool_size, self.strides, x.shape[2:])
        return api.pool2d(x, *self.pool_size, *self.strides, *pad, self.pool_type, name=self.name)


class MaxPooling2D(Pooling2D):
    kind, default_name, pool_type = "MaxPooling2D", "pool2d", PoolType.POOL_MAX


class AveragePooling2D(Pooling2D):
    kind, default_name, pool_type = "AveragePooling2D", "pool2d", PoolType.POOL_AVG


__all__ = ["AveragePooling2D", "MaxPooling2D", "Pooling2D"]
