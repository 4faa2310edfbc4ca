"""flexflow.keras' merge layers (Concatenate, Add, Subtract, Multiply, Maximum, Minimum) and
their functional forms, mapped onto the layer API's concat and element-wise binary ops."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexflow.errors import ShapeError
from flexflow.keras.layers.base import Layer
from flexflow.keras.tensor import KerasTensor
from flexflow.layers import LayerAPI, Tensor


class Merge(Layer):
    """An element-wise binary op (`method` of the layer API) over two or more tensors of one
    rank, applied left to right; `at_most_two` for those Keras defines on two only. As
    FlexFlow's merge layers, each dimension may be 1 in one tensor and is repeated to the
    other's (its elementwise_mul_broadcast example: (B, 10, 1) times (B, 10, 2))."""

    takes_list, method, at_most_two = True, "add", False

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        if len(inputs) < 2 or (self.at_most_two and len(inputs) > 2):
            wanted = "exactly 2" if self.at_most_two else "2 or more"
            raise ShapeError(f"it takes {wanted} tensors, got {len(inputs)}; pass a list of them.")
        out = getattr(api, self.method)(inputs[0], inputs[1], name=self.name)
        for i, other in enumerate(inputs[2:], start=1):
            out = getattr(api, self.method)(out, other, name=f"{self.name}_{i}")
        return out


class Add(Merge):
    kind, default_name, method = "Add", "add", "add"


class Subtract(Merge):
    kind, default_name, method, at_most_two = "Subtract", "subtract", "subtract", True


class Multiply(Merge):
    kind, default_name, method = "Multiply", "multiply", "multiply"


class Divide(Merge):
    """x / y (the `/` of Keras tensors)."""

    kind, default_name, method, at_most_two = "Divide", "divide", "divide", True


class Maximum(Merge):
    kind, default_name, method = "Maximum", "max", "max"


class Minimum(Merge):
    kind, default_name, method = "Minimum", "min", "min"


class Concatenate(Layer):
    """The tensors joined along `axis` (counted with the sample as 0; -1 the last)."""

    kind, default_name, takes_list = "Concatenate", "concat", True

    def __init__(self, axis: int = -1, **keywords: Any) -> None:
        super().__init__(**keywords)
        self.axis = axis

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        rank = len(inputs[0].shape)
        if not -rank < self.axis < rank or self.axis in (0, -rank):
            raise ShapeError(
                f"axis {self.axis} is not one of the inputs' dimensions after the sample's "
                f"(1..{rank - 1}, or -1..-{rank - 1}); pass one of those."
            )
        return api.concat(inputs, self.axis % rank, name=self.name)


def concatenate(
    inputs: Sequence[KerasTensor], _axis: int = 1, axis: int | None = None, **keywords: Any
) -> KerasTensor:
    """FlexFlow's functional concatenate: along axis 1 (the channels of its images) unless
    `_axis` (FlexFlow's keyword) or `axis` says otherwise; the Concatenate layer's default is
    Keras' -1."""
    return Concatenate(axis=_axis if axis is None else axis, **keywords)(list(inputs))


def add(inputs: Sequence[KerasTensor], **keywords: Any) -> KerasTensor:
    return Add(**keywords)(list(inputs))


def subtract(inputs: Sequence[KerasTensor], **keywords: Any) -> KerasTensor:
    return Subtract(**keywords)(list(inputs))


def multiply(inputs: Sequence[KerasTensor], **keywords: Any) -> KerasTensor:
    return Multiply(**keywords)(list(inputs))


def maximum(inputs: Sequence[KerasTensor], **keywords: Any) -> KerasTensor:
    return Maximum(**keywords)(list(inputs))


def minimum(inputs: Sequence[KerasTensor], **keywords: Any) -> KerasTensor:
    return Minimum(**keywords)(list(inputs))


__all__ = [
    "Add",
    "Concatenate",
    "Divide",
    "Maximum",
    "Merge",
    "Minimum",
    "Multiply",
    "Subtract",
    "add",
    "concatenate",
    "maximum",
    "minimum",
    "multiply",
    "subtract",
]
