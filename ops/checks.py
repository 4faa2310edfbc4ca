"""The checks every op kind's `infer` runs on its inputs and hyperparameters: ShapeErrors naming the layer, what it got and the fix."""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
from collections.abc import Sequence

import numpy as np

from flexflow.errors import ShapeError

from .base import Op, Shape, TensorSpec


def expect_inputs(kind: str, name: str, inputs: Sequence[TensorSpec], count: int) -> None:
    if len(inputs) != count:
        raise ShapeError(
            f"{kind} '{name}': expected {count} input tensor(s), got {len(inputs)}; "
            f"pass exactly {count}."
        )


def expect_rank(
    kind: str, name: str, spec: TensorSpec, ranks: Sequence[int], what: str = "input"
) -> None:
    if len(spec.shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ShapeError(
            f"{kind} '{name}': {what} must have rank {want}, got shape {spec.shape} "
            f"(rank {len(spec.shape)}); reshape or flatten it first."
        )


def expect_float(kind: str, name: str, spec: TensorSpec, what: str = "input") -> None:
    if not spec.dtype.is_float:
        raise ShapeError(
            f"{kind} '{name}': {what} must be float32, got {spec.dtype.value} tensor of shape "
            f"{spec.shape}; only embedding takes integer inputs."
        )


def is_int(value: object) -> bool:
    """An integer, numpy's included, and not a bool (True is 1 to Python, never a size here)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def python_scalars(op: Op) -> Op:
    """`op` with numpy scalars among its fields made Python's (`dense(x, labels.max() + 1)`
    passes an np.int64, which validates as an integer but is no JSON value: compile failed)."""
    if not dataclasses.is_dataclass(op):
        return op
    changes = {}
    for field in dataclasses.fields(op):
        value = getattr(op, field.name)
        plain = _plain(value)
        if plain is not value:
            changes[field.name] = plain
    return dataclasses.replace(op, **changes) if changes else op


def _plain(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple) and any(isinstance(v, np.generic) for v in value):
        return tuple(_plain(v) for v in value)
    return value


def is_real(value: object) -> bool:
    """A real number, numpy's included, and not a bool, a string or None: one to compare."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_float32_lambda(value: object) -> bool:
    """A penalty's lambda the float32 kernels can hold: a real number >= 0 that stays finite
    and, unless 0, nonzero as a float32 (1e39 would be inf there and 1e-46 would be 0, which
    would blow the weights up or add no penalty, without a word)."""
    if not is_real(value) or not 0 <= value < math.inf:
        return False
    try:
        with np.errstate(over="ignore", under="ignore"):
            single = np.float32(value)
    except OverflowError:  # an int past float64's range
        return False
    return bool(np.isfinite(single)) and (value == 0 or single != 0)


def expect_positive(kind: str, name: str, **values: int) -> None:
    """Sizes, kernels and strides: whole numbers >= 1 (a float 2.5 was truncated or kept)."""
    for key, value in values.items():
        if not is_int(value) or value <= 0:
            raise ShapeError(
                f"{kind} '{name}': {key} must be a positive integer, got {value!r}; pass a whole "
                "number >= 1."
            )


def expect_non_negative(kind: str, name: str, **values: int) -> None:
    """Paddings and optional sizes: whole numbers >= 0."""
    for key, value in values.items():
        if not is_int(value) or value < 0:
            raise ShapeError(
                f"{kind} '{name}': {key} must be an integer >= 0, got {value!r}; pass a whole "
                "number (0 for none)."
            )


def expect_positive_real(kind: str, name: str, **values: float) -> None:
    """Epsilons: finite numbers > 0 (NaN compares false with everything and passed `<= 0`)."""
    for key, value in values.items():
        real = is_real(value)
        if not real or not math.isfinite(value) or value <= 0:
            raise ShapeError(
                f"{kind} '{name}': {key} must be a positive finite number, got {value!r}; pass "
                "a small positive number such as 1e-5."
            )


def expect_member(kind: str, name: str, **values: tuple[object, type[enum.Enum]]) -> None:
    """Modes given as members of their enums (`activation=(value, ActiMode)`): an int, a string
    or another enum's member (FlexFlow's `pool2d` takes the pool type before the activation, so
    an ActiMode lands there easily) was kept and then ignored or misread by the kernels."""
    for key, (value, members) in values.items():
        if not isinstance(value, members):
            names = ", ".join(f"{members.__name__}.{m.name}" for m in members)
            raise ShapeError(
                f"{kind} '{name}': {key} must be a member of {members.__name__}, got {value!r}; "
                f"pass one of {names}."
            )


def normalize_axis(kind: str, name: str, axis: int, rank: int, shape: Shape) -> int:
    if not is_int(axis) or not -rank <= axis < rank:
        raise ShapeError(
            f"{kind} '{name}': axis {axis!r} is out of range for input shape {shape} (rank "
            f"{rank}); pass an integer axis from {-rank} to {rank - 1}."
        )
    return axis % rank
