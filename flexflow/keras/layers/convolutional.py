"""flexflow.keras' Conv2D on channels-first images (FlexFlow's NCHW), mapped onto `conv2d`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexflow.errors import NotOfferedError, ShapeError
from flexflow.keras import activations, initializers
from flexflow.keras.layers.base import Layer, pair
from flexflow.keras.layers.core import drawn, refuse_regularizers
from flexflow.layers import LayerAPI, Tensor


def padding_of(layer: Layer, padding: Any, kernel: tuple[int, int], stride: tuple[int, int],
               size: tuple[int, int]) -> tuple[int, int]:  # fmt: skip
    """Keras' padding as FlexFlow's symmetric (height, width) padding: 'valid' is none,
    'same' the padding that gives ceil(size / stride) outputs (refused where it would need
    one more row or column on one side than the other), a pair or int as given."""
    if padding == "valid":
        return 0, 0
    if padding != "same":
        return pair(layer, "padding", padding)
    sides = []
    for k, s, n in zip(kernel, stride, size, strict=True):
        total = max((-(-n // s) - 1) * s + k - n, 0)
        if total % 2:
            raise ShapeError(
                f"{layer.kind} '{layer.name}': padding='same' with kernel {kernel}, strides "
                f"{stride} on {size} needs {total} rows or columns: Keras puts the odd one "
                "at the bottom or right, which FlexFlow's padding (the same on both sides) "
                "cannot express, and a symmetric padding=(height, width) computes other "
                "values; choose a kernel, stride or input size that pads evenly, or 'valid'."
            )
        sides.append(total // 2)
    return sides[0], sides[1]


class Conv2D(Layer):
    """A 2-D convolution of `filters` output channels over (sample, channel, height, width)."""

    kind, default_name = "Conv2D", "conv2d"

    def __init__(
        self,
        filters: int,
        input_shape: Sequence[int] | None = None,
        kernel_size: Any = 0,
        strides: Any = (1, 1),
        padding: Any = "valid",
        data_format: str | None = None,
        dilation_rate: Any = (1, 1),
        groups: int = 1,
        activation: str | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        **keywords: Any,
    ) -> None:
        super().__init__(input_shape=input_shape, **keywords)
        label = f"Conv2D '{self.name}'"
        refuse_regularizers(
            label,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        if data_format not in (None, "channels_first"):
            raise NotOfferedError(
                f"{label}: data_format={data_format!r} is not offered; images are "
                "channels_first (sample, channel, height, width) as in FlexFlow."
            )
        if pair(self, "dilation_rate", dilation_rate) != (1, 1):
            raise NotOfferedError(f"{label}: dilation_rate is not offered; leave it (1, 1).")
        if padding not in ("valid", "same"):
            pair(self, "padding", padding)  # checked now, used when called
        self.filters = filters
        self.kernel_size = pair(self, "kernel_size", kernel_size)
        self.strides = pair(self, "strides", strides)
        self.padding = padding
        self.groups, self.use_bias = groups, use_bias
        self.activation = activations.check_activation(label, activation)
        self.kernel_initializer = initializers.kernel_initializer(label, kernel_initializer)
        self.bias_initializer = initializers.bias_initializer(label, bias_initializer)

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        x = inputs[0]
        if len(x.shape) != 4:
            raise ShapeError(
                f"Conv2D takes (sample, channel, height, width) images, got shape {x.shape}; "
                "reshape the input to channels-first images."
            )
        pad = padding_of(self, self.padding, self.kernel_size, self.strides, x.shape[2:])
        fused, after = activations.split(self.activation)
        out = api.conv2d(
            x,
            self.filters,
            *self.kernel_size,
            *self.strides,
            *pad,
            fused,
            self.groups,
            self.use_bias,
            name=self.name,
            **drawn(self.kernel_initializer, final, self.name),
        )
        if after is None:
            return out
        return activations.add_activation(api, out, after, f"{self.name}_{after}")


__all__ = ["Conv2D"]
