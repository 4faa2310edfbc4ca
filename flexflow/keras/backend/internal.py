"""FlexFlow's Keras element-wise functions as layers (Sin, Cos, Exp, Pow, Rsqrt, ReduceSum,
BatchMatmul, Gather), mapped onto the layer API's functions of the same names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexflow.keras.layers.base import Layer
from flexflow.keras.tensor import KerasTensor
from flexflow.layers import LayerAPI, Tensor


class Function(Layer):
    """A one-input function: `method` of the layer API."""

    method = "exp"

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return getattr(api, self.method)(inputs[0], name=self.name)


class Sin(Function):
    kind, default_name, method = "Sin", "sin", "sin"


class Cos(Function):
    kind, default_name, method = "Cos", "cos", "cos"


class Exp(Function):
    kind, default_name, method = "Exp", "exp", "exp"


class Rsqrt(Function):
    kind, default_name, method = "Rsqrt", "rsqrt", "rsqrt"


class Pow(Layer):
    """x ** a for a number `a`."""

    kind, default_name = "Pow", "pow"

    def __init__(self, a: float, **keywords: Any) -> None:
        super().__init__(**keywords)
        self.a = a

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return api.pow(inputs[0], self.a, name=self.name)


class ReduceSum(Layer):
    """The sum over `axis` (an int or a list; the sample is axis 0 and is not summed)."""

    kind, default_name = "ReduceSum", "reduce_sum"

    def __init__(self, axis: int | Sequence[int], keepdims: bool = False, **keywords: Any):
        super().__init__(**keywords)
        self.axis, self.keepdims = axis, keepdims

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        return api.reduce_sum(inputs[0], axes, self.keepdims, name=self.name)


class BatchMatmul(Layer):
    """x @ y over each sample (FlexFlow's batch_dot)."""

    kind, default_name, takes_list = "BatchMatmul", "batch_matmul", True

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return api.batch_matmul(inputs[0], inputs[1], name=self.name)


class Gather(Layer):
    """x's entries picked along `axis` by the int32 tensor `indices` (torch.gather; the layer
    API's gather): called on [x, indices], its output has the indices' shape."""

    kind, default_name, takes_list = "Gather", "gather", True

    def __init__(self, axis: int = 0, **keywords: Any) -> None:
        super().__init__(**keywords)
        self.axis = axis

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return api.gather(inputs[0], inputs[1], self.axis, name=self.name)


def rsqrt(x: KerasTensor) -> KerasTensor:
    return Rsqrt()(x)


def gather(x: KerasTensor, indices: KerasTensor, axis: int) -> KerasTensor:
    return Gather(axis)([x, indices])


__all__ = [
    "BatchMatmul",
    "Cos",
    "Exp",
    "Gather",
    "Pow",
    "ReduceSum",
    "Rsqrt",
    "Sin",
    "gather",
    "rsqrt",
]
