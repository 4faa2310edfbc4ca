"""Optimizers: how a weight tile and its state tiles change given the tile of its gradient.

An optimizer is an immutable value. Its update is element-wise, so it runs on any tiling of a
weight: the runtime keeps each state (momentum, Adam's moments) in a Legate store shaped and
partitioned like its weight and updates every tile where that tile lives, and the result does
not depend on the tiling. `update` is the reference the runtime's tasks (and the GPU kernels)
compute; it works in float32 like the stores, in a fixed order of operations, so every tiling
gives bit-identical weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from flexflow.errors import FlexFlowError


class Optimizer(Protocol):
    learning_rate: float

    @property
    def state_names(self) -> tuple[str, ...]: ...

    def update(
        self, weight: np.ndarray, grad: np.ndarray, states: Sequence[np.ndarray], step: int
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """The new weight tile and state tiles after update number `step` (1, 2, ...)."""
        ...

    def to_json(self) -> dict: ...


def _check(name: str, **values: float) -> None:
    for key, value in values.items():
        low_ok = value > 0 if key in ("learning_rate", "epsilon") else value >= 0
        high_ok = value < 1 if key in ("momentum", "beta1", "beta2") else True
        if not (isinstance(value, int | float) and low_ok and high_ok):
            bound = "in [0, 1)" if key in ("momentum", "beta1", "beta2") else "positive"
            if key == "weight_decay":
                bound = ">= 0"
            raise FlexFlowError(f"{name}: {key} must be {bound}, got {value!r}.")


_F32 = np.float32


@dataclass(frozen=True, slots=True)
class SGDOptimizer:
    """SGD with optional (Nesterov) momentum and L2 weight decay, as PyTorch defines them:
    g' = g + weight_decay * w; v = momentum * v + g'; w -= lr * (g' + momentum * v if nesterov
    else v). With momentum 0 there is no state and w -= lr * g'."""

    learning_rate: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        _check(
            "SGDOptimizer",
            learning_rate=self.learning_rate,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
        )
        if self.nesterov and self.momentum == 0:
            raise FlexFlowError("SGDOptimizer: nesterov needs a momentum > 0.")

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("momentum",) if self.momentum else ()

    def update(self, weight, grad, states, step):
        lr, mu, wd = _F32(self.learning_rate), _F32(self.momentum), _F32(self.weight_decay)
        grad = grad.astype(_F32, copy=False)
        if wd:
            grad = grad + wd * weight
        if not mu:
            return weight - lr * grad, ()
        velocity = mu * states[0] + grad
        direction = grad + mu * velocity if self.nesterov else velocity
        return weight - lr * direction, (velocity,)

    def to_json(self) -> dict:
        return {
            "type": "sgd",
            "learning_rate": self.learning_rate,
            "momentum": self.momentum,
            "weight_decay": self.weight_decay,
            "nesterov": self.nesterov,
        }


@dataclass(frozen=True, slots=True)
class AdamOptimizer:
    """Adam (Kingma & Ba) with bias correction and L2 weight decay folded into the gradient:
    g' = g + weight_decay * w; m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
    w -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + epsilon)."""

    learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _check(
            "AdamOptimizer",
            learning_rate=self.learning_rate,
            beta1=self.beta1,
            beta2=self.beta2,
            epsilon=self.epsilon,
            weight_decay=self.weight_decay,
        )

    @property
    def state_names(self) -> tuple[str, ...]:
        return ("m", "v")

    def update(self, weight, grad, states, step):
        b1, b2 = _F32(self.beta1), _F32(self.beta2)
        grad = grad.astype(_F32, copy=False)
        if self.weight_decay:
            grad = grad + _F32(self.weight_decay) * weight
        m = b1 * states[0] + (_F32(1) - b1) * grad
        v = b2 * states[1] + (_F32(1) - b2) * grad * grad
        m_hat = m / _F32(1 - self.beta1**step)
        v_hat = v / _F32(1 - self.beta2**step)
        return weight - _F32(self.learning_rate) * m_hat / (np.sqrt(v_hat) + _F32(self.epsilon)), (
            m,
            v,
        )

    def to_json(self) -> dict:
        return {
            "type": "adam",
            "learning_rate": self.learning_rate,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "epsilon": self.epsilon,
            "weight_decay": self.weight_decay,
        }


def optimizer_from_json(data: dict) -> Optimizer:
    """The optimizer `to_json` described (checkpoints record it)."""
    kinds = {"sgd": SGDOptimizer, "adam": AdamOptimizer}
    fields = dict(data)
    kind = fields.pop("type", None)
    if kind not in kinds:
        raise FlexFlowError(f"unknown optimizer type {kind!r}; expected one of {sorted(kinds)}.")
    try:
        return kinds[kind](**fields)
    except TypeError as exc:
        raise FlexFlowError(f"optimizer {kind}: {exc}") from None
