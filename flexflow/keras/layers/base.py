"""The base of flexflow.keras' layers: a Keras layer is called on symbolic tensors, and
`build_ff` maps it onto this package's layer API (`flexflow.layers.LayerAPI`) at compile.

Calling a layer builds it once on a throwaway `LayerAPI` with one sample, so its output shape,
its parameters and any ShapeError come from the same op code that will train it; the error
then names the Keras layer and the shapes it was called on.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from flexflow.errors import FlexFlowError, NotOfferedError, ShapeError
from flexflow.keras.tensor import KerasTensor, Node
from flexflow.layers import LayerAPI, Tensor

if TYPE_CHECKING:
    from flexflow.core import FFModel

_names_taken: collections.Counter[str] = collections.Counter()


def unique_name(default: str) -> str:
    """FlexFlow's default layer name, numbered from its second use in this process
    ('dense', 'dense_1', ...): this package's layers need distinct names within a model."""
    count = _names_taken[default]
    _names_taken[default] += 1
    return default if count == 0 else f"{default}_{count}"


def refuse_unknown(kind: str, keywords: dict[str, Any]) -> None:
    """Keras arguments flexflow.keras does not implement: refused by name, not ignored."""
    given = {k: v for k, v in keywords.items() if v is not None}
    if given:
        names = ", ".join(sorted(given))
        raise NotOfferedError(
            f"{kind}: argument(s) {names} are not offered by flexflow.keras; leave them out."
        )


def shape_text(tensors: Sequence[KerasTensor]) -> str:
    return ", ".join(str(t.batch_shape) for t in tensors)


class Layer:
    """A Keras layer: constructed with its settings, called on KerasTensors, built into an
    FFModel at compile (`build_ff`). Subclasses set `kind` (Keras' class name),
    `default_name` (FlexFlow's) and `takes_list` (merge layers take a list of tensors)."""

    kind = "Layer"
    default_name = "layer"
    takes_list = False

    def __init__(
        self, name: str | None = None, input_shape: Sequence[int] | None = None, **rest: Any
    ) -> None:
        refuse_unknown(type(self).__name__, rest)
        if name is not None and (not isinstance(name, str) or not name):
            raise FlexFlowError(f"{self.kind}: name must be a non-empty string, got {name!r}.")
        self.name = name if name is not None else unique_name(self.default_name)
        self.input_shape = None if input_shape is None else _shape(self, input_shape)
        self.nodes: list[Node] = []
        self.param_count = 0

    # ---- what a subclass defines ---------------------------------------------------------
    def build_ff(self, api: LayerAPI, inputs: list[Tensor]) -> Tensor:
        """Add this layer's ops to `api` reading `inputs` (sample first); the output."""
        raise NotImplementedError

    # ---- calling ---------------------------------------------------------------------------
    def __call__(self, inputs: KerasTensor | Sequence[KerasTensor]) -> KerasTensor:
        tensors = self._tensors(inputs)
        if self.input_shape is not None and not self.takes_list:
            if tensors[0].shape != self.input_shape:
                raise ShapeError(
                    f"{self.kind} '{self.name}': input_shape={self.input_shape}, but it is "
                    f"called on a tensor of shape {tensors[0].batch_shape}; pass the input's "
                    "shape (without the sample dimension) or leave input_shape out."
                )
        shape, dtype, params = self._probe(tensors)
        node = Node(self, tuple(tensors))
        out = KerasTensor(shape, dtype, node, name=f"{self.name}:{len(self.nodes)}")
        node.outputs = (out,)
        for tensor in tensors:
            tensor.to_layers.append(self)
        self.nodes.append(node)
        self.param_count = params
        return out

    def _tensors(self, inputs: Any) -> list[KerasTensor]:
        many = isinstance(inputs, (list, tuple))
        if many != self.takes_list:
            wanted = "a list of tensors" if self.takes_list else "one tensor"
            raise ShapeError(
                f"{self.kind} '{self.name}' takes {wanted}, got {type(inputs).__name__}; "
                f"call it as {self.kind}(...)({'[x, y]' if self.takes_list else 'x'})."
            )
        tensors = list(inputs) if many else [inputs]
        for tensor in tensors:
            if not isinstance(tensor, KerasTensor):
                raise ShapeError(
                    f"{self.kind} '{self.name}' is called on Keras tensors (from Input(...) "
                    f"or another layer), got {type(tensor).__name__}."
                )
        return tensors

    def _probe(self, tensors: list[KerasTensor]) -> tuple[tuple[int, ...], Any, int]:
        """Build the layer on one sample: its output shape (no sample), dtype, parameters."""
        api = LayerAPI()
        handles = [
            api.create_tensor((1, *t.shape), t.dtype, name=f"keras_probe_{i}")
            for i, t in enumerate(tensors)
        ]
        try:
            out = self.build_ff(api, handles)
        except FlexFlowError as problem:
            raise type(problem)(
                f"{self.kind} '{self.name}' called on {shape_text(tensors)}: {problem}"
            ) from None
        params = sum(math.prod(p.spec.shape) for p in api.graph().parameters)
        return tuple(out.shape[1:]), out.dtype, params

    # ---- FlexFlow's layer attributes -------------------------------------------------------
    def _last(self) -> Node:
        if not self.nodes:
            raise FlexFlowError(
                f"{self.kind} '{self.name}' has not been called on a tensor yet; call it "
                "(or add it to a Sequential) first."
            )
        return self.nodes[-1]

    @property
    def input_tensors(self) -> list[KerasTensor]:
        return list(self._last().inputs)

    @property
    def output_tensors(self) -> list[KerasTensor]:
        return list(self._last().outputs)

    @property
    def input(self) -> KerasTensor | list[KerasTensor]:
        inputs = self.input_tensors
        return inputs if self.takes_list else inputs[0]

    @property
    def output(self) -> KerasTensor:
        return self._last().outputs[0]

    @property
    def output_shape(self) -> tuple[int | None, ...]:
        return self.output.batch_shape

    @property
    def prev_layers(self) -> list[Layer]:
        return [t.from_layer for t in self.input_tensors if t.from_layer is not None]

    @property
    def next_layers(self) -> list[Layer]:
        return list(self.output.to_layers)

    # ---- weights (FlexFlow's: the compiled model is passed in) -----------------------------
    def get_weights(self, ffmodel: FFModel) -> tuple[np.ndarray, ...]:
        """The layer's weights in the compiled `ffmodel` (`model.ffmodel`), in FlexFlow's
        order and layout: a Dense's (kernel (units, inputs), bias)."""
        handle = self._handle(ffmodel, "get_weights")
        count = handle.get_number_parameters()
        return tuple(handle.get_parameter_by_id(i).get_weights(ffmodel) for i in range(count))

    def set_weights(self, ffmodel: FFModel, *arrays: Any) -> None:
        """Write the layer's weights: FlexFlow's `set_weights(ffmodel, kernel, bias)`, or a
        list as `get_weights` returns them."""
        if len(arrays) == 1 and isinstance(arrays[0], (list, tuple)):
            arrays = tuple(arrays[0])
        handle = self._handle(ffmodel, "set_weights")
        count = handle.get_number_parameters()
        if len(arrays) != count:
            raise ShapeError(
                f"{self.kind} '{self.name}'.set_weights: the layer has {count} weight(s), got "
                f"{len(arrays)} array(s); pass them in get_weights' order."
            )
        for i, array in enumerate(arrays):
            handle.get_parameter_by_id(i).set_weights(ffmodel, array)

    def _handle(self, ffmodel: Any, call: str):
        if ffmodel is None or not hasattr(ffmodel, "get_layer_by_name"):
            raise FlexFlowError(
                f"{self.kind} '{self.name}'.{call} takes the compiled model's FFModel "
                f"(model.ffmodel, after model.compile(...)), got {ffmodel!r}."
            )
        return ffmodel.get_layer_by_name(self.name)

    def __repr__(self) -> str:
        return f"<{self.kind} '{self.name}'>"


def _shape(layer: Layer, shape: Any) -> tuple[int, ...]:
    """`shape` without the sample dimension, as positive integers."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        dims = ()
    if not dims or any(d <= 0 for d in dims) or any(isinstance(d, bool) for d in shape):
        raise ShapeError(
            f"{layer.kind} '{layer.name}': input_shape must be positive integers without the "
            f"sample dimension (e.g. (784,) or (1, 28, 28)), got {shape!r}."
        )
    return dims


def pair(layer: Layer, what: str, value: Any) -> tuple[int, int]:
    """An int or a pair of ints as (height, width), as Keras takes kernel sizes and strides."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value), int(value)
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value)
    ):
        return int(value[0]), int(value[1])
    raise ShapeError(
        f"{layer.kind} '{layer.name}': {what} is an int or a pair (height, width), got {value!r}."
    )


__all__ = ["Layer", "pair", "refuse_unknown", "unique_name"]
