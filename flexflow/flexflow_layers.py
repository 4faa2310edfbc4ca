"""FlexFlow's layer handles, for scripts written against it (`flexflow.core`): a model's layers
by id or name (`get_layer_by_id`, `get_layer_by_name`, `get_layers`, `print_layers`), each
with its inputs, outputs and parameters, and a parameter's weights read and written
(`get_weights`, `set_weights`, or `inline_map`, `get_array`, `inline_unmap`).

A layer is one call of the layer API, numbered from 0 in the order the script made them, as
FlexFlow numbers its layers (an LSTM's unrolled steps are one layer). A parameter is one of
the layer's weights, in FlexFlow's order: the kernel, then the bias. Its array has FlexFlow's
layout too (a dense kernel is (out_dim, in_dim), a convolution's (out_channels,
in_channels, kernel_h, kernel_w)), which is this package's own. Weights are read from and
written to the compiled model (`Executor.get_weights`, `set_weights`); before `compile` a
layer exists but its weights do not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexflow.errors import FlexFlowError, NotOfferedError, ShapeError
from flexflow.flexflow_loop import Stage
from flexflow.graph import OpNode
from flexflow.graph import Parameter as GraphParameter
from flexflow.layers import LAYER_METHODS

if TYPE_CHECKING:
    from flexflow.core import FFModel
    from flexflow.layers import Tensor


class Parameter:
    """One weight of a layer (FlexFlow's `Parameter`): its name here is `<layer>.<weight>`."""

    def __init__(self, model: FFModel, name: str, shape: tuple[int, ...]) -> None:
        self._model, self.name, self.dims = model, name, shape
        self._mapped: tuple[np.ndarray, np.ndarray] | None = None
        """The array `inline_map` handed out, and its values then."""

    @property
    def num_dims(self) -> int:
        return len(self.dims)

    def get_weights(self, ffmodel: FFModel) -> np.ndarray:
        """A copy of the weight's values (float32, shape `dims`)."""
        return self._executor(ffmodel, "get_weights").get_weights()[self.name]

    def set_weights(self, ffmodel: FFModel, np_array: Any) -> None:
        """Replace the weight's values with `np_array` (shape `dims`)."""
        self._write(ffmodel, np_array, "set_weights")

    def _write(self, ffmodel: FFModel, np_array: Any, call: str) -> None:
        executor = self._executor(ffmodel, call)
        if ffmodel._loop.stage is not Stage.IDLE:  # the iteration begun reads the weights
            raise FlexFlowError(
                f"{call} of '{self.name}' between forward() and update(): FlexFlow's forward "
                "pass has read the weights by then (here the iteration runs whole at update()); "
                "call it before forward() or after update()."
            )
        array = np.asarray(np_array)
        if array.shape != self.dims:
            raise ShapeError(
                f"{call} of '{self.name}': the weight has shape {self.dims}, got an array "
                f"of shape {array.shape}; pass one of shape {self.dims}."
            )
        executor.set_weights({self.name: array})

    def inline_map(self, ffmodel: FFModel, *config: Any) -> None:
        """Map the weight: `get_array` then gives its values, and what is written into that
        array becomes the weight's at `inline_unmap` (as a FlexFlow region's writes do)."""
        if self._mapped is not None:
            raise FlexFlowError(
                f"inline_map of '{self.name}': it is mapped already; inline_unmap it first."
            )
        values = self.get_weights(ffmodel)
        self._mapped = (values, values.copy())

    def get_array(self, ffmodel: FFModel, *config: Any) -> np.ndarray:
        """The mapped values (`inline_map` first)."""
        self._executor(ffmodel, "get_array")
        if self._mapped is None:
            raise FlexFlowError(
                f"get_array of '{self.name}': call inline_map(ffmodel, ffconfig) first, and "
                "inline_unmap(ffmodel, ffconfig) to write the array back."
            )
        return self._mapped[0]

    def get_flat_array(self, ffmodel: FFModel, *config: Any) -> np.ndarray:
        return self.get_array(ffmodel).reshape(-1)

    def inline_unmap(self, ffmodel: FFModel, *config: Any) -> None:
        """Unmap the weight, writing the mapped array back if it was written to (a map only
        read leaves the weight as training made it meanwhile)."""
        if self._mapped is None:
            raise FlexFlowError(f"inline_unmap of '{self.name}': it is not mapped.")
        values, when_mapped = self._mapped
        if not np.array_equal(values, when_mapped, equal_nan=True):
            self._write(ffmodel, values, "inline_unmap")  # still mapped if it fails
        self._mapped = None

    def is_mapped(self) -> bool:
        return self._mapped is not None

    def _executor(self, ffmodel: FFModel, method: str):
        if ffmodel is not self._model:
            raise FlexFlowError(
                f"{method} of '{self.name}' takes its own model first ({method}(ffmodel, ...), "
                f"as FlexFlow's API), got {type(ffmodel).__name__}."
            )
        if ffmodel._trainer is None:
            raise FlexFlowError(
                f"{method} of '{self.name}': the model's weights exist once it is compiled; "
                "call ffmodel.compile(...) first."
            )
        return ffmodel.executor

    def __repr__(self) -> str:
        return f"Parameter('{self.name}', dims={self.dims})"


class Layer:
    """One layer of a model (FlexFlow's `Op`): its id, name and kind, and its tensors."""

    def __init__(self, model: FFModel, idx: int, ops: tuple[OpNode, ...]) -> None:
        self._model, self.idx, self._ops = model, idx, ops
        self.name = ops[0].layer

    @property
    def kind(self) -> str:
        return self._ops[0].kind

    def get_number_parameters(self) -> int:
        return len(self._ops[0].weights)

    def get_parameter_by_id(self, id: int) -> Parameter:
        """The layer's `id`-th weight: 0 the kernel, 1 the bias (where it has them)."""
        weights = self._ops[0].weights
        self._check("parameter", id, len(weights))
        param = self._model._params[weights[id]]
        return Parameter(self._model, param.name, param.spec.shape)

    def get_weight_tensor(self) -> Parameter:
        """The kernel (a layer without one: its first weight, as FlexFlow's parameter 0)."""
        return self._named("kernel", fallback=0)

    def get_bias_tensor(self) -> Parameter:
        return self._named("bias")

    def _named(self, weight: str, fallback: int | None = None) -> Parameter:
        names = [self._model._params[pid].name for pid in self._ops[0].weights]
        wanted = f"{self.name}.{weight}"
        if wanted in names:
            return self.get_parameter_by_id(names.index(wanted))
        if fallback is not None and names:
            return self.get_parameter_by_id(fallback)
        listed = ", ".join(f"{i}: '{n}'" for i, n in enumerate(names)) or "none"
        raise FlexFlowError(
            f"{self.kind} layer {self.idx} '{self.name}' has no {weight}; its weights are "
            f"{listed} (get_parameter_by_id(i))."
        )

    def get_number_inputs(self) -> int:
        return len(self._ops[0].inputs)

    def get_input_by_id(self, id: int) -> Tensor:
        inputs = self._ops[0].inputs
        self._check("input", id, len(inputs))
        return self._tensor(inputs[id])

    def get_input_tensor(self) -> Tensor:
        return self.get_input_by_id(0)

    get_input_tensor_by_id = get_input_by_id

    def get_number_outputs(self) -> int:
        return len(self._ops[-1].outputs)

    def get_output_by_id(self, id: int) -> Tensor:
        outputs = self._ops[-1].outputs
        self._check("output", id, len(outputs))
        return self._tensor(outputs[id])

    def get_output_tensor(self) -> Tensor:
        return self.get_output_by_id(0)

    get_output_tensor_by_id = get_output_by_id

    def _tensor(self, tid: int) -> Tensor:
        spec = self._model._tensors[tid].spec
        return self._model._handle(tid, spec.shape, spec.dtype)

    def _check(self, what: str, id: Any, count: int) -> None:
        if not isinstance(id, int) or not 0 <= id < count:
            raise FlexFlowError(
                f"{self.kind} layer {self.idx} '{self.name}' has {count} {what}(s), numbered "
                f"from 0; got {what} {id!r}."
            )

    def describe(self) -> str:
        """One line for `print_layers`: id, name, kind, output shapes and weights."""
        outputs = ", ".join(str(self._tensor(t).shape) for t in self._ops[-1].outputs)
        params = [self._model._params[pid] for pid in self._ops[0].weights]
        weights = ", ".join(f"{p.name} {p.spec.shape}" for p in params) or "no weights"
        return f"layer {self.idx} '{self.name}' ({self.kind}): output {outputs}; {weights}"

    def __repr__(self) -> str:
        return f"Layer({self.idx}, '{self.name}', {self.kind})"


def layers_of(model: FFModel) -> dict[int, Layer]:
    """The model's layers by id, in the order its script added them."""
    by_name: dict[str, list[OpNode]] = {}
    for node in model._ops:
        by_name.setdefault(node.layer, []).append(node)
    return {i: Layer(model, i, tuple(ops)) for i, ops in enumerate(by_name.values())}


def layer_by_id(model: FFModel, layer_id: int) -> Layer:
    layers = layers_of(model)
    if type(layer_id) is not int or layer_id not in layers:
        raise FlexFlowError(
            f"get_layer_by_id({layer_id!r}): the model has {len(layers)} layer(s), numbered "
            "from 0 in the order they were added."
        )
    return layers[layer_id]


def layer_by_name(model: FFModel, layer_name: str) -> Layer:
    layers = layers_of(model).values()
    for layer in layers:
        if layer.name == layer_name:
            return layer
    names = ", ".join(f"'{layer.name}'" for layer in list(layers)[:8])
    raise FlexFlowError(
        f"get_layer_by_name({layer_name!r}): no layer has that name; the model's layers are "
        f"{names}{' ...' if len(layers) > 8 else ''}."
    )


def print_layers(model: FFModel, layer_id: int = -1) -> None:
    """Print every layer (`layer_id` -1) or one, a line each."""
    layers = [layer_by_id(model, layer_id)] if layer_id != -1 else layers_of(model).values()
    for layer in layers:
        print(layer.describe())


NOT_OFFERED_LAYERS = frozenset(
    ("reverse", "argmax", "arg_top_k", "beam_top_k", "sampling", "rms_norm",
     "residual_rms_norm",
     "residual_layer_norm", "add_bias_residual_layer_norm", "sigmoid_silu_multi",
     "inc_multihead_self_attention", "spec_inc_multihead_self_attention",
     "inc_multihead_self_attention_verify", "inc_multiquery_self_attention",
     "spec_inc_multiquery_self_attention", "inc_multiquery_self_attention_verify",
     "add_lora_layer", "create_constant", "map_tensor", "add_layer", "generate",
     "generate_inf_only", "set_position_offset", "set_transformer_layer_id")
)  # fmt: skip
"""FlexFlow's FFModel methods this API does not offer: reverse, the arg/top-k and
sampling layers, its fused normalizations, and its LLM-serving (incremental decoding) API."""


def not_offered(name: str) -> NotOfferedError:
    """The error for FlexFlow's FFModel method `name`, one of NOT_OFFERED_LAYERS."""
    return NotOfferedError(
        f"FFModel.{name} (a FlexFlow layer or call) is not offered here. The layers offered "
        f"are {', '.join(LAYER_METHODS)}; FlexFlow's LLM serving (inc_*, generate) is not."
    )


class LayerHandles:
    """FlexFlow's FFModel methods over a model's layers (`flexflow.core.FFModel` has them):
    layers by id and name, weights by id, and FlexFlow's methods not offered here named as
    such (NotOfferedError) instead of a bare AttributeError."""

    _ops: list[OpNode]
    _params: list[GraphParameter]

    def get_layers(self) -> dict[int, Layer]:
        return layers_of(self)

    def get_layer_by_id(self, layer_id: int) -> Layer:
        return layer_by_id(self, layer_id)

    def get_layer_by_name(self, layer_name: str) -> Layer:
        return layer_by_name(self, layer_name)

    def get_last_layer(self) -> Layer:
        layers = layers_of(self)
        if not layers:
            raise FlexFlowError("get_last_layer(): the model has no layers yet; add them first.")
        return layers[len(layers) - 1]

    def print_layers(self, id: int = -1) -> None:  # noqa: A002 (FlexFlow's keyword)
        print_layers(self, id)

    def get_tensor_by_id(self, id: int) -> Parameter:  # noqa: A002 (FlexFlow's keyword)
        """The model's `id`-th weight (FlexFlow numbers them as the layers made them)."""
        if not isinstance(id, int) or not 0 <= id < len(self._params):
            raise FlexFlowError(
                f"get_tensor_by_id({id!r}): the model has {len(self._params)} weights, "
                "numbered from 0."
            )
        param = self._params[id]
        return Parameter(self, param.name, param.spec.shape)

    def prefetch(self) -> None:
        """Nothing to do: a batch set is copied into the iteration that reads it."""


def _refused(name: str) -> property:
    def refuse(self: LayerHandles) -> Any:
        raise not_offered(name)

    return property(refuse, doc=f"FlexFlow's {name}: not offered here (NotOfferedError).")


# properties, not a __getattr__: an AttributeError inside another property (a model's
# `executor` before compile) keeps its own message, and hasattr(model, "rms_norm") is False
for _name in NOT_OFFERED_LAYERS:
    setattr(LayerHandles, _name, _refused(_name))
