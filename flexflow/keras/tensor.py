"""The symbolic tensors of flexflow.keras: what a Keras layer returns when called, before a
model is compiled (FlexFlow builds its FFModel only at `compile`, once -b gives the batch size).

A `KerasTensor` knows its shape without the sample dimension, its element type and the `Node`
(one call of one layer) that produced it; a model is the nodes reachable from its outputs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flexflow.ops import DType

if TYPE_CHECKING:
    from flexflow.keras.layers.base import Layer

_calls = itertools.count()
"""Numbers the nodes in the order the script made them: a topological order of any model."""


@dataclass(eq=False, slots=True)
class Node:
    """One call of `layer` on `inputs`, giving `outputs`; `order` places it among all calls."""

    layer: Layer
    inputs: tuple[KerasTensor, ...]
    outputs: tuple[KerasTensor, ...] = ()
    order: int = field(default_factory=lambda: next(_calls))


@dataclass(eq=False, slots=True)
class KerasTensor:
    """A symbolic tensor: `shape` leaves the sample dimension out (Keras' `shape[1:]`)."""

    shape: tuple[int, ...]
    dtype: DType = DType.FLOAT32
    node: Node | None = None  # None for a model input (`Input`)
    name: str = ""
    to_layers: list[Layer] = field(default_factory=list)
    """The layers that read this tensor (FlexFlow's `Tensor.to_layers`)."""
    input_layer: Any = None
    """A model input's `InputLayer` (None for a layer's output)."""

    @property
    def from_layer(self) -> Layer | None:
        """The layer that made this tensor; an input's is its `InputLayer`."""
        return self.node.layer if self.node is not None else self.input_layer

    @property
    def batch_shape(self) -> tuple[None, ...]:
        """Keras' shape with the sample dimension (None: -b gives it at compile)."""
        return (None, *self.shape)

    @property
    def num_dims(self) -> int:
        return len(self.shape) + 1

    # Keras' operators on symbolic tensors (FlexFlow's rsqrt.py writes `rsqrt(x + inp2)`)
    def __add__(self, other: Any) -> KerasTensor:
        return _arithmetic("add", self, other)

    def __sub__(self, other: Any) -> KerasTensor:
        return _arithmetic("subtract", self, other)

    def __mul__(self, other: Any) -> KerasTensor:
        return _arithmetic("multiply", self, other)

    def __truediv__(self, other: Any) -> KerasTensor:
        return _arithmetic("divide", self, other)

    def __repr__(self) -> str:
        made = f", from {self.from_layer.name!r}" if self.from_layer is not None else ""
        return f"KerasTensor(shape={self.batch_shape}, dtype={self.dtype.value}{made})"


def _arithmetic(kind: str, x: KerasTensor, other: Any) -> KerasTensor:
    from flexflow.keras.layers.arithmetic import arithmetic  # layers import this module

    return arithmetic(kind, x, other)


__all__ = ["KerasTensor", "Node"]
