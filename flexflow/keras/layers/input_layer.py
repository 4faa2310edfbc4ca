"""flexflow.keras' model inputs: `Input(shape=...)` gives the symbolic tensor a functional
model starts from (the sample dimension comes from -b at compile)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexflow.errors import NotOfferedError, ShapeError
from flexflow.keras.layers.base import Layer, refuse_unknown, unique_name
from flexflow.keras.tensor import KerasTensor
from flexflow.ops import DType

DTYPES: dict[Any, DType] = {
    None: DType.FLOAT32,
    "float32": DType.FLOAT32,
    "int32": DType.INT32,
    "int64": DType.INT64,
}
"""Keras' dtype names of the element types inputs take here."""


class InputLayer(Layer):
    """The layer a model input comes from (FlexFlow's `InputLayer`); no op of its own."""

    kind, default_name = "InputLayer", "input"

    def __init__(self, tensor: KerasTensor, name: str) -> None:
        self.name, self.tensor = name, tensor
        self.input_shape, self.nodes, self.param_count = tensor.shape, [], 0

    @property
    def output(self) -> KerasTensor:
        return self.tensor


def Input(  # noqa: N802 (Keras' name)
    shape: Sequence[int] | int | None = None,
    batch_size: int | None = None,
    name: str | None = None,
    dtype: Any = None,
    sparse: bool = False,
    tensor: Any = None,
    batch_shape: Sequence[int] | None = None,
) -> KerasTensor:
    """A model input of `shape` (without the sample dimension; `batch_shape` with it)."""
    label = f"Input(name={name!r})" if name else "Input"
    refuse_unknown(label, {"sparse": sparse or None, "tensor": tensor})
    if batch_shape is not None:
        if shape is not None:
            raise ShapeError(f"{label}: pass shape or batch_shape, not both.")
        shape = tuple(batch_shape)[1:]
    if isinstance(shape, int):
        shape = (shape,)
    if shape is None or not all(isinstance(d, int) and d > 0 for d in shape) or not shape:
        raise ShapeError(
            f"{label}: shape must be positive ints without the sample dimension (e.g. "
            f"shape=(784,) or (3, 32, 32)), got {shape!r}."
        )
    key = getattr(dtype, "__name__", dtype)
    key = str(key) if key is not None else None
    if key not in DTYPES:
        raise NotOfferedError(
            f"{label}: dtype {dtype!r} is not offered; inputs are 'float32', 'int32' or 'int64'."
        )
    out = KerasTensor(tuple(shape), DTYPES[key], name=name or "")
    out.input_layer = InputLayer(out, name or unique_name("input"))
    out.name = out.input_layer.name
    return out


__all__ = ["DTYPES", "Input", "InputLayer"]
