"""Keras' activation names, as tables: those a Dense or Conv2D computes inside its own op
(FlexFlow's ActiMode) and those added as an op of their own (Activation, or a Dense's
softmax)."""

from __future__ import annotations

from flexflow.errors import FlexFlowError
from flexflow.layers import LayerAPI, Tensor
from flexflow.ops import ActiMode

FUSED: dict[str | None, ActiMode] = {
    None: ActiMode.AC_MODE_NONE,
    "linear": ActiMode.AC_MODE_NONE,
    "relu": ActiMode.AC_MODE_RELU,
    "sigmoid": ActiMode.AC_MODE_SIGMOID,
    "tanh": ActiMode.AC_MODE_TANH,
}
"""Activations a dense or conv2d op applies itself."""

SEPARATE: dict[str, str] = {
    "relu": "relu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "elu": "elu",
    "gelu": "gelu",
    "softmax": "softmax",
    "linear": "identity",
}
"""Activations as ops of their own: the name of the LayerAPI method that adds each."""


def check_activation(layer: str, activation: object) -> str | None:
    """`activation` if Keras names one flexflow.keras computes, else a FlexFlowError."""
    if activation is None or activation in FUSED or activation in SEPARATE:
        return activation  # type: ignore[return-value]
    choices = ", ".join(sorted(SEPARATE))
    raise FlexFlowError(f"{layer}: unknown activation {activation!r}; choose one of {choices}.")


def split(activation: str | None) -> tuple[ActiMode, str | None]:
    """The ActiMode the layer's op applies and the activation op to add after it (or None)."""
    if activation in FUSED:
        return FUSED[activation], None
    return ActiMode.AC_MODE_NONE, activation


def add_activation(api: LayerAPI, x: Tensor, activation: str, name: str) -> Tensor:
    """Add the op of `activation` reading `x`, named `name`."""
    return getattr(api, SEPARATE[activation])(x, name=name)


__all__ = ["FUSED", "SEPARATE", "add_activation", "check_activation", "split"]
