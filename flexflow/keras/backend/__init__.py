"""FlexFlow's `flexflow.keras.backend`: its backend's name and the element-wise functions its
examples call on Keras tensors (`K.sum(x, axis=1)`, ...)."""

from __future__ import annotations

from collections.abc import Sequence

from flexflow.keras.backend.internal import BatchMatmul, Cos, Exp, Pow, ReduceSum, Sin, rsqrt
from flexflow.keras.tensor import KerasTensor


def backend() -> str:
    """The backend's name, as FlexFlow's."""
    return "flexflow"


def batch_dot(x: KerasTensor, y: KerasTensor) -> KerasTensor:
    return BatchMatmul()([x, y])


def sin(x: KerasTensor) -> KerasTensor:
    return Sin()(x)


def cos(x: KerasTensor) -> KerasTensor:
    return Cos()(x)


def exp(x: KerasTensor) -> KerasTensor:
    return Exp()(x)


def pow(x: KerasTensor, a: float) -> KerasTensor:  # noqa: A001 (FlexFlow's name)
    return Pow(a)(x)


def sum(  # noqa: A001 (FlexFlow's name)
    x: KerasTensor, axis: int | Sequence[int] | None = None, keepdims: bool = False
) -> KerasTensor:
    if axis is None:  # every axis but the sample's
        axis = list(range(1, x.num_dims))
    return ReduceSum(axis, keepdims)(x)


__all__ = ["backend", "batch_dot", "cos", "exp", "pow", "rsqrt", "sin", "sum"]
