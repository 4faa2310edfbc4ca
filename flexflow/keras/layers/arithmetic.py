"""Keras tensors' `+ - * /`: with another tensor the element-wise layers (Add, ...), with a
number the layer API's scalar ops (scalar_add, ...)."""

from __future__ import annotations

from numbers import Real
from typing import Any

from flexflow.errors import ShapeError
from flexflow.keras.layers.base import Layer
from flexflow.keras.layers.merge import Add, Divide, Multiply, Subtract
from flexflow.keras.tensor import KerasTensor
from flexflow.layers import LayerAPI, Tensor

TENSOR_LAYERS: dict[str, type[Layer]] = {
    "add": Add,
    "subtract": Subtract,
    "multiply": Multiply,
    "divide": Divide,
}
SCALAR_METHODS: dict[str, str] = {
    "add": "scalar_add",
    "subtract": "scalar_sub",
    "multiply": "scalar_multiply",
    "divide": "scalar_true_divide",
}


class ScalarOp(Layer):
    """A tensor and a number (`x + 2.0`): one of the layer API's scalar ops."""

    kind = "ScalarOp"

    def __init__(self, method: str, scalar: Real, **keywords: Any) -> None:
        self.default_name, self.method, self.scalar = method, method, scalar
        super().__init__(**keywords)

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return getattr(api, self.method)(inputs[0], self.scalar, name=self.name)


def arithmetic(kind: str, x: KerasTensor, other: Any) -> KerasTensor:
    if isinstance(other, KerasTensor):
        return TENSOR_LAYERS[kind]()([x, other])
    if isinstance(other, Real) and not isinstance(other, bool):
        return ScalarOp(SCALAR_METHODS[kind], other)(x)
    raise ShapeError(
        f"a Keras tensor {kind} takes another Keras tensor or a number, got {type(other).__name__}."
    )


__all__ = ["ScalarOp", "arithmetic"]
