"""flexflow.keras' core layers (Dense, Activation, Flatten, Dropout, Reshape, Permute,
Embedding), each mapped onto one call of the layer API (a Dense with an activation its op
cannot apply, such as softmax, adds that activation's op after it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexflow.errors import FlexFlowError, NotOfferedError, ShapeError
from flexflow.keras import activations, initializers
from flexflow.keras.initializers import Initializer
from flexflow.keras.layers.base import Layer, refuse_unknown
from flexflow.layers import LayerAPI, Tensor
from flexflow.ops.embedding import AggrMode
from flexflow.regularizers import kernel_l2


def refuse_regularizers(layer: str, **given: Any) -> None:
    """Regularizers and constraints a layer does not take: refused by name. As in FlexFlow,
    only a Dense layer's kernel_regularizer (an L2 one) is taken."""
    named = sorted(k for k, v in given.items() if v is not None)
    if named:
        raise NotOfferedError(
            f"{layer}: {', '.join(named)} not offered by flexflow.keras (as in FlexFlow, only "
            "a Dense layer's kernel_regularizer, an L2 one, is); leave it out, or for an L2 "
            "penalty on every weight pass weight_decay to the optimizer (flexflow.optimizers)."
        )


def drawn(init: Initializer, final: bool, layer: str) -> dict[str, Any]:
    """The kernel initializer to pass the layer API for the layer named `layer`: only one
    that draws values, and only when building the model to train (the probe's LayerAPI takes
    none)."""
    handle = init.for_layer(layer).ffhandle if final else None
    return {} if handle is None else {"kernel_initializer": handle}


class Dense(Layer):
    """A fully connected layer of `units` outputs (`dense`); an L2 `kernel_regularizer`
    (`regularizers.L2(l)`) adds l * W to its kernel's gradient once per step
    (`flexflow.regularizers`)."""

    kind, default_name = "Dense", "dense"

    def __init__(
        self,
        units: int,
        input_shape: Sequence[int] | None = None,
        activation: str | None = None,
        use_bias: bool = True,
        kernel_initializer: Any = "glorot_uniform",
        bias_initializer: Any = "zeros",
        kernel_regularizer: Any = None,
        bias_regularizer: Any = None,
        activity_regularizer: Any = None,
        kernel_constraint: Any = None,
        bias_constraint: Any = None,
        **keywords: Any,
    ) -> None:
        super().__init__(input_shape=input_shape, **keywords)
        label = f"Dense '{self.name}'"
        refuse_regularizers(
            label,
            bias_regularizer=bias_regularizer,
            activity_regularizer=activity_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
        )
        kernel_l2(label, kernel_regularizer)  # an L1 or a bad lambda is refused here, early
        self.kernel_regularizer = kernel_regularizer
        """Passed on to the layer API's dense as FlexFlow's Keras Dense passes it."""
        self.units = units
        self.activation = activations.check_activation(label, activation)
        self.use_bias = use_bias
        self.kernel_initializer = initializers.kernel_initializer(label, kernel_initializer)
        self.bias_initializer = initializers.bias_initializer(label, bias_initializer)

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        fused, after = activations.split(self.activation)
        out = api.dense(
            inputs[0],
            self.units,
            fused,
            self.use_bias,
            kernel_regularizer=self.kernel_regularizer,
            name=self.name,
            **drawn(self.kernel_initializer, final, self.name),
        )
        if after is None:
            return out
        return activations.add_activation(api, out, after, f"{self.name}_{after}")


class Activation(Layer):
    """An activation as an op of its own (FlexFlow names the layer after the activation)."""

    kind = "Activation"

    def __init__(self, activation: str | None = None, **keywords: Any) -> None:
        label = f"Activation({activation!r})"
        if activation is None:
            raise FlexFlowError(f"{label}: name the activation, e.g. Activation('relu').")
        self.activation = activations.check_activation(label, activation)
        self.default_name = str(activation)
        super().__init__(**keywords)

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return activations.add_activation(api, inputs[0], self.activation, self.name)


class Flatten(Layer):
    """Every dimension after the sample's made one (`flat`)."""

    kind, default_name = "Flatten", "flat"

    def __init__(self, data_format: str | None = None, **keywords: Any) -> None:
        refuse_unknown("Flatten", {"data_format": data_format})
        super().__init__(**keywords)

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return api.flat(inputs[0], name=self.name)


class Dropout(Layer):
    """Inverted dropout of `rate` while training (`dropout`; its masks from `seed`)."""

    kind, default_name = "Dropout", "dropout"

    def __init__(
        self, rate: float, noise_shape: Any = None, seed: int | None = None, **keywords: Any
    ) -> None:
        refuse_unknown("Dropout", {"noise_shape": noise_shape})
        super().__init__(**keywords)
        self.rate, self.seed = rate, seed

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return api.dropout(inputs[0], self.rate, self.seed, name=self.name)


class Reshape(Layer):
    """The input's values in `target_shape` (without the sample dimension)."""

    kind, default_name = "Reshape", "reshape"

    def __init__(self, target_shape: Sequence[int], **keywords: Any) -> None:
        super().__init__(**keywords)
        if isinstance(target_shape, int) or not all(isinstance(d, int) for d in target_shape):
            raise ShapeError(
                f"Reshape '{self.name}': target_shape is a tuple of ints without the sample "
                f"dimension, got {target_shape!r}."
            )
        self.target_shape = tuple(target_shape)

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        batch = inputs[0].shape[0]
        return api.reshape(inputs[0], (batch, *self.target_shape), name=self.name)  # (B, *target)


class Permute(Layer):
    """The input's dimensions reordered. Keras' `dims` order those after the sample's,
    numbered from 1 ((2, 1) swaps them); FlexFlow's Keras Permute takes the whole order,
    sample included ((0, 2, 1)): a `dims` holding 0 is read as FlexFlow's."""

    kind, default_name = "Permute", "permute"

    def __init__(self, dims: Sequence[int], **keywords: Any) -> None:
        super().__init__(**keywords)
        self.dims = tuple(dims)
        first = 0 if 0 in self.dims else 1
        if sorted(self.dims) != list(range(first, first + len(self.dims))):
            raise ShapeError(
                f"Permute '{self.name}': dims must order 1..{len(self.dims)} (the dimensions "
                f"after the sample's, Keras') or 0..{len(self.dims) - 1} (all of them, "
                f"FlexFlow's), got {self.dims}."
            )

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        perm = self.dims if 0 in self.dims else (0, *self.dims)
        if len(perm) != len(inputs[0].shape):
            raise ShapeError(
                f"dims {self.dims} order {len(perm)} dimensions with the sample's, the input "
                f"has {len(inputs[0].shape)}; pass one entry for each."
            )
        return api.transpose(inputs[0], perm, name=self.name)


class Embedding(Layer):
    """An embedding of `input_dim` ids into `output_dim` values, summed over the ids of a
    sample as FlexFlow's Keras Embedding does (AGGR_MODE_SUM): (B, L) ids give (B, D)."""

    kind, default_name = "Embedding", "embedding"

    def __init__(
        self,
        input_dim: int,
        output_dim: int,
        embeddings_initializer: Any = "uniform",
        input_length: int | None = None,
        **keywords: Any,
    ) -> None:
        if input_length is not None and "input_shape" not in keywords:
            keywords["input_shape"] = (input_length,)
        super().__init__(**keywords)
        if embeddings_initializer not in ("uniform", None):  # an object would be ignored
            raise NotOfferedError(
                f"Embedding '{self.name}': embeddings_initializer {embeddings_initializer!r} "
                "is not offered; leave it out (the layer's own draw, uniform in [-0.05, 0.05))."
            )
        self.input_dim, self.output_dim = input_dim, output_dim

    def build_ff(self, api: LayerAPI, inputs: list[Tensor], final: bool = False) -> Tensor:
        return api.embedding(
            inputs[0], self.input_dim, self.output_dim, AggrMode.AGGR_MODE_SUM, name=self.name
        )


__all__ = ["Activation", "Dense", "Dropout", "Embedding", "Flatten", "Permute", "Reshape"]
