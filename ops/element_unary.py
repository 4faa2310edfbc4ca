"""Element-wise activation or function as its own op: sample and attribute dims (paper Table 1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from flexflow.errors import ShapeError, shown

from .activations import ACTIVATIONS, ActiMode
from .base import (
    SAVED_AT_DEFAULT_ONLY_IF_SET,
    Arrays,
    DimKind,
    Op,
    Region,
    Signature,
    TensorSpec,
    region_volume,
)
from .checks import expect_float, expect_inputs, is_real
from .layouts import sample_dims
from .registry import register
from .unary_functions import UNARY_FUNCTIONS, UnaryFunction


@register
@dataclass(frozen=True, slots=True)
class ElementUnary(Op):
    """y = act(x), or y = function(x[, scalar]), element by element, for x of any rank >= 1
    with the sample first. `function` (FlexFlow's exp, sin, cos, pow, rsqrt, scalar_*; see
    `unary_functions`) is applied instead of the activation, which is then AC_MODE_NONE."""

    kind = "element_unary"
    activation: ActiMode = ActiMode.AC_MODE_NONE
    # saved only when set: an activation's attributes stay {"activation": ...}, as measured
    # profiles and graph files written before these fields hold them
    function: UnaryFunction | None = field(default=None, metadata=SAVED_AT_DEFAULT_ONLY_IF_SET)
    scalar: float | None = field(default=None, metadata=SAVED_AT_DEFAULT_ONLY_IF_SET)
    """pow's exponent or the scalar_* operand; None for every other function and activation."""

    def __post_init__(self) -> None:
        # a number is kept as a float (graph files, cost keys and kernels take one); an int
        # past float's range stays as given, for `infer` to refuse by name
        if is_real(self.scalar) and type(self.scalar) is not float:
            try:
                object.__setattr__(self, "scalar", float(self.scalar))
            except OverflowError:
                pass

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        if len(x.shape) < 1:
            raise ShapeError(
                f"element_unary '{name}': input must have rank >= 1 (sample first), got shape "
                f"{x.shape}; add a batch dimension."
            )
        if self.function is not None:
            self._check_function(name, x)
        elif self.scalar is not None:
            raise ShapeError(
                f"element_unary '{name}': activation {self.activation.value} takes no scalar, "
                f"got {self.scalar!r}; pass scalar=None."
            )
        out = TensorSpec(x.shape)
        return Signature((x,), (out,), (), sample_dims(len(out.shape), DimKind.ATTRIBUTE))

    def _check_function(self, name: str, x: TensorSpec) -> None:
        """The function's scalar: a finite number where it takes one (pow's exponent), none
        where it does not, and no activation beside it."""
        assert self.function is not None
        label = f"{self.function.value} '{name}' (input {x.shape})"
        if self.activation is not ActiMode.AC_MODE_NONE:
            raise ShapeError(
                f"{label}: applies {self.function.value} or activation "
                f"{self.activation.value}, not both; add the activation as a layer of its own."
            )
        wanted = UNARY_FUNCTIONS[self.function].scalar
        if wanted is None:
            if self.scalar is not None:
                raise ShapeError(f"{label}: takes no scalar, got {self.scalar!r}; pass None.")
            return
        if not _finite_real(self.scalar):
            raise ShapeError(
                f"{label}: {wanted} must be a finite number, got {shown(self.scalar)}; pass a float "
                "such as 2.0."
            )
        if self.function is UnaryFunction.SCALAR_TRUE_DIVIDE and self.scalar == 0:
            raise ShapeError(
                f"{label}: divides by {wanted} 0, which makes every element infinite or NaN; "
                "pass a non-zero scalar."
            )

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        return (region,)

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        # the gradient costs about as much as the function itself (see ACTIVATIONS)
        if self.function is None:
            per_element = ACTIVATIONS[self.activation].flops_per_element
        else:
            per_element = UNARY_FUNCTIONS[self.function].flops_per_element
        work = float(per_element * region_volume(region))
        return work, work

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        if self.function is not None:
            return (UNARY_FUNCTIONS[self.function].forward(x, self.scalar_value),)
        y = ACTIVATIONS[self.activation].forward(x)
        return (y.copy() if y is x else y,)  # AC_MODE_NONE must not alias its input

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        (y,) = outputs
        dy = grad_outputs[0]
        if self.function is not None:
            return (UNARY_FUNCTIONS[self.function].grad(x, y, dy, self.scalar_value),), ()
        dx = ACTIVATIONS[self.activation].grad(x, y, dy)
        return (dx.copy() if dx is dy else dx,), ()

    @property
    def scalar_value(self) -> float:
        """The scalar as the kernels take it: a float, 0.0 for a function that takes none."""
        return 0.0 if self.scalar is None else float(self.scalar)


def _finite_real(value: object) -> bool:
    """A real number within float's range (an int past it is refused, not an OverflowError)."""
    if not is_real(value):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False
