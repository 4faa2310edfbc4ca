"""Weight regularizers: FlexFlow's L2 kernel regularizer of a dense layer (its
src/ops/kernels/linear_kernels.cu, REG_MODE_L2), as a penalty its parameter's update adds.

FlexFlow's dense layer takes `kernel_regularizer`, an object with a `type` (RegularizerMode)
and a `_lambda`; after the kernel's gradient GEMM its backward adds `lambda * W` to the
kernel's gradient (the gradient of lambda/2 * ||W||^2, so lambda, not 2 lambda) and asserts
"Only L2 regularization is supported" for any other mode. Here the lambda belongs to the
kernel's parameter (`flexflow.graph.Parameter.l2`), not to the dense op: it changes nothing
the op computes, so the op's attributes, the measured profiles keyed by them and the
simulator's costs stay those of an unregularized dense (the update's one more multiply-add per
weight is within the update cost's noise), and a strategy file is unaffected.

The gradient gains `lambda * W` exactly once per training step, on the whole (summed)
gradient, whatever the strategy: every update path (`flexflow.optimizers`' numpy `apply` and
its C twin native/optimizers.c, the runtime's update tasks and the C step's pending update,
the GPU update kernels) adds it where it reads the summed gradient, before the optimizer's own
weight_decay: g' = (g + lambda * W) + weight_decay * W. FlexFlow adds it in every replica's
backward before the replicas' gradients are summed, so under data parallelism of degree n it
counts it n times; that is not copied here (one device and any strategy train the same).

The loss a step reports stays the data loss, as FlexFlow's metrics report it: the penalty
lambda/2 * ||W||^2 is not added to it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from flexflow.errors import FlexFlowError, NotOfferedError, shown
from flexflow.ops.checks import is_float32_lambda


class RegularizerMode(enum.Enum):
    """FlexFlow's regularizer kinds (flexflow.type.RegularizerMode, with its values): what
    a regularizer's `type` says it is."""

    REG_MODE_NONE = 17
    REG_MODE_L1 = 18
    REG_MODE_L2 = 19


class Regularizer:
    """Base of the regularizer values (FlexFlow's keras.regularizers.Regularizer): a `type`
    (RegularizerMode) and a `_lambda`, which FlexFlow's dense reads."""

    type: RegularizerMode = RegularizerMode.REG_MODE_NONE
    _lambda: float = 0.0
    """A plain class attribute, so a subclass written as FlexFlow's (`self.type = ...;
    self._lambda = l2` in its __init__) can set it; the values below compute it."""


@dataclass(frozen=True)
class L2(Regularizer):
    """An L2 penalty l2/2 * ||W||^2 on a dense layer's kernel: its gradient gains l2 * W
    (FlexFlow's `keras.regularizers.L2(l2)`; Keras' default 0.01)."""

    l2: float = 0.01
    type = RegularizerMode.REG_MODE_L2

    @property
    def _lambda(self) -> float:
        return self.l2


@dataclass(frozen=True)
class L1(Regularizer):
    """An L1 penalty l1 * |W| (FlexFlow's `keras.regularizers.L1(l1)`): FlexFlow's kernels do
    not compute it, nor do these; a layer given one refuses it."""

    l1: float = 0.01
    type = RegularizerMode.REG_MODE_L1

    @property
    def _lambda(self) -> float:
        return self.l1


@dataclass(frozen=True)
class L1L2(Regularizer):
    """Keras' L1 and L2 penalties together (not FlexFlow's): an L2 regularizer when `l1` is 0,
    else an L1 one, which a layer refuses."""

    l1: float = 0.0
    l2: float = 0.0

    @property
    def type(self) -> RegularizerMode:  # type: ignore[override]
        return RegularizerMode.REG_MODE_L1 if self.l1 else RegularizerMode.REG_MODE_L2

    @property
    def _lambda(self) -> float:
        return self.l1 if self.l1 else self.l2


def check_l2(layer: str, value: object) -> float:
    """`value` as an L2 lambda of `layer`'s kernel: a number >= 0 that float32 holds
    (`is_float32_lambda`), as a Python float; else FlexFlowError naming the layer."""
    if not is_float32_lambda(value):
        raise FlexFlowError(
            f"{layer}: kernel_regularizer's lambda must be a number >= 0 that float32 holds "
            f"(finite, nonzero unless 0), got {shown(value)}; pass e.g. L2(0.001) (0 adds no "
            "penalty)."
        )
    return float(value)


def kernel_l2(layer: str, regularizer: object | None) -> float:
    """The lambda `layer`'s kernel gets from FlexFlow's `kernel_regularizer` argument: 0.0
    for None or a REG_MODE_NONE regularizer, the `_lambda` of an L2 one (checked:
    `check_l2`); an L1 regularizer is NotOfferedError (FlexFlow asserts "Only L2
    regularization is supported"), anything else FlexFlowError."""
    if regularizer is None:
        return 0.0
    mode = getattr(regularizer, "type", None)
    if mode is RegularizerMode.REG_MODE_NONE:
        return 0.0
    if mode is RegularizerMode.REG_MODE_L1:
        raise NotOfferedError(
            f"{layer}: kernel_regularizer {regularizer!r} is an L1 penalty, which is not "
            "offered (FlexFlow's kernels compute only L2); pass an L2 regularizer, e.g. "
            "flexflow.keras.regularizers.L2(0.001)."
        )
    if mode is not RegularizerMode.REG_MODE_L2:
        hint = (
            f" (a layer name goes by keyword: name={regularizer!r})"
            if isinstance(regularizer, str)
            else ""
        )
        raise FlexFlowError(
            f"{layer}: kernel_regularizer must be a regularizer whose type is a "
            f"RegularizerMode (e.g. flexflow.keras.regularizers.L2(0.001)), got "
            f"{regularizer!r}{hint}."
        )
    return check_l2(layer, getattr(regularizer, "_lambda", None))


__all__ = ["L1", "L1L2", "L2", "Regularizer", "RegularizerMode", "check_l2", "kernel_l2"]
