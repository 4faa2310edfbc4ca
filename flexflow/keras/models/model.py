"""flexflow.keras' functional Model: the layers between its inputs (from `Input`) and its
output, in the order the script called them."""

from __future__ import annotations

from collections.abc import Sequence

from flexflow.errors import FlexFlowError
from flexflow.keras.models.base import BaseModel
from flexflow.keras.models.graph import nodes_between
from flexflow.keras.models.sequential import chain
from flexflow.keras.tensor import KerasTensor, Node


class Model(BaseModel):
    def __init__(
        self,
        inputs: KerasTensor | Sequence[KerasTensor],
        outputs: KerasTensor | Sequence[KerasTensor],
        name: str | None = None,
    ) -> None:
        super().__init__(name)
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if isinstance(outputs, (list, tuple)):
            if len(outputs) != 1:
                raise FlexFlowError(
                    f"Model: {len(outputs)} outputs; a model here has one output (the loss "
                    "reads it): build one model per output."
                )
            outputs = outputs[0]
        for tensor in [*inputs, outputs]:
            if not isinstance(tensor, KerasTensor):
                raise FlexFlowError(
                    f"Model(inputs, outputs) takes Keras tensors, got {type(tensor).__name__}."
                )
        for tensor in inputs:
            if tensor.node is not None:
                raise FlexFlowError(
                    f"Model: input {tensor!r} is a layer's output; inputs come from "
                    "Input(shape=...)."
                )
        self._inputs, self._output = inputs, outputs
        self._graph = nodes_between(inputs, outputs)

    def _nodes(self) -> list[Node]:
        return list(self._graph)

    @property
    def inputs(self) -> list[KerasTensor]:
        return list(self._inputs)

    @property
    def output(self) -> KerasTensor:
        return self._output

    def __call__(self, x: KerasTensor) -> KerasTensor:
        """The model's layers applied to `x` (a chain only; FlexFlow's nesting)."""
        return chain(self, x)


__all__ = ["Model"]
