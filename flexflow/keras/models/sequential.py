"""flexflow.keras' Sequential: a chain of layers, the first given its input_shape (or an
Input added first); models added to it are chained layer by layer (FlexFlow's nesting)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexflow.errors import FlexFlowError, NotOfferedError
from flexflow.keras.layers.base import Layer
from flexflow.keras.layers.input_layer import Input
from flexflow.keras.models.base import BaseModel
from flexflow.keras.models.graph import check_distinct
from flexflow.keras.tensor import KerasTensor, Node


def chain(model: BaseModel, x: KerasTensor) -> KerasTensor:
    """`model`'s layers called again, in order, on `x`; the model must be a chain (each
    layer reads the one before it) for that to mean the same model."""
    previous = model.inputs
    for node in model._nodes():
        if len(previous) != 1 or list(node.inputs) != previous:
            raise FlexFlowError(
                f"{model.name}: only a chain of layers can be added to a Sequential or called "
                f"on a tensor; layer {node.layer.name!r} reads "
                f"{[t.name for t in node.inputs]}; build the whole model with the functional "
                "API instead."
            )
        previous = list(node.outputs)
        x = node.layer(x)
    return x


class Sequential(BaseModel):
    def __init__(self, layers: Sequence[Any] | None = None, name: str | None = None) -> None:
        super().__init__(name)
        self._input: KerasTensor | None = None
        self._chain: list[Node] = []
        for layer in layers or []:
            self.add(layer)

    def add(self, item: Layer | BaseModel | KerasTensor) -> None:
        """Append a layer, a model's layers, or (first) an Input."""
        if self._ffmodel is not None:
            raise FlexFlowError("Sequential.add: the model is compiled; add layers before it.")
        if isinstance(item, KerasTensor):
            if self._input is not None:
                raise FlexFlowError(
                    "Sequential.add: an Input goes first, before any layer; this model has one."
                )
            self._input = item
            return
        if isinstance(item, BaseModel):
            if self._input is None:
                first = item.inputs[0]
                self._input = Input(shape=first.shape, dtype=first.dtype.value)
            before = self.output
            chain(item, before)
            self._extend_from(before)
            return
        if not isinstance(item, Layer):
            raise FlexFlowError(
                f"Sequential.add takes a layer, a model or an Input, got {type(item).__name__}."
            )
        if self._input is None:
            if item.input_shape is None:
                raise FlexFlowError(
                    f"Sequential: the first layer, {item.kind} '{item.name}', has no "
                    "input_shape; pass input_shape=(...) (without the sample dimension) to it, "
                    "or add an Input(shape=...) first."
                )
            first = Input(shape=item.input_shape)
            item(first)  # the model's input only once the layer takes it
            self._input = first
            self._extend_from(first)
            return
        before = self.output
        item(before)
        self._extend_from(before)

    def _extend_from(self, before: KerasTensor) -> None:
        """Append the nodes made since `before` was the output (its readers, in order)."""
        tensor = before
        new: list[Node] = []
        while tensor.to_layers:
            node = tensor.to_layers[-1].nodes[-1]
            if tensor not in node.inputs:
                break
            new.append(node)
            tensor = node.outputs[0]
        check_distinct(self._chain + new)
        self._chain += new

    def pop(self) -> None:
        raise NotOfferedError("Sequential.pop is not offered; build the model again without it.")

    def _nodes(self) -> list[Node]:
        return list(self._chain)

    @property
    def inputs(self) -> list[KerasTensor]:
        if self._input is None:
            raise FlexFlowError("Sequential: the model has no layers yet; add some first.")
        return [self._input]

    @property
    def output(self) -> KerasTensor:
        return self._chain[-1].outputs[0] if self._chain else self.inputs[0]

    def __call__(self, x: KerasTensor) -> KerasTensor:
        """The model's layers applied to `x` (FlexFlow's nesting)."""
        return chain(self, x)


__all__ = ["Sequential", "chain"]
