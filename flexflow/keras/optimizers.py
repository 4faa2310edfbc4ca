"""FlexFlow's Keras optimizers (SGD, Adam): Keras' arguments over `flexflow.optimizers`'
frozen values; the learning rate can change while training (`set_learning_rate`, which
LearningRateScheduler calls) and reaches the compiled model from the next iteration."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from flexflow.errors import FlexFlowError
from flexflow.optimizers import AdamOptimizer, SGDOptimizer


class Optimizer:
    """An optimizer a Keras model compiles with; `ffhandle` is its `flexflow.optimizers`
    value, `model` the compiled FFModel it trains (set by `compile`)."""

    def __init__(self, handle: SGDOptimizer | AdamOptimizer) -> None:
        self._handle = handle
        self.model: Any = None

    @property
    def ffhandle(self) -> SGDOptimizer | AdamOptimizer:
        return self._handle

    @property
    def lr(self) -> float:
        return self._handle.learning_rate

    learning_rate = lr

    def set_learning_rate(self, learning_rate: float) -> None:
        """Train at `learning_rate` from the next iteration (the states stay)."""
        self._handle = replace(self._handle, learning_rate=float(learning_rate))
        if self.model is not None:
            self.model.set_learning_rate(float(learning_rate))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._handle!r})"


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum."""

    def __init__(
        self,
        learning_rate: float = 0.01,
        momentum: float = 0.0,
        nesterov: bool = False,
        weight_decay: float = 0.0,
        lr: float | None = None,
        name: str = "SGD",
    ) -> None:
        rate = learning_rate if lr is None else lr
        super().__init__(
            SGDOptimizer(rate, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
        )


class Adam(Optimizer):
    """Adam (epsilon 1e-7 as Keras' and FlexFlow's Keras Adam; its core AdamOptimizer's is
    1e-8)."""

    def __init__(
        self,
        learning_rate: float = 0.001,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        amsgrad: bool = False,
        weight_decay: float = 0.0,
        lr: float | None = None,
        name: str = "Adam",
    ) -> None:
        if amsgrad:
            raise FlexFlowError("Adam(amsgrad=True) is not offered; leave amsgrad False.")
        rate = learning_rate if lr is None else lr
        super().__init__(
            AdamOptimizer(
                rate, beta1=beta_1, beta2=beta_2, epsilon=epsilon, weight_decay=weight_decay
            )
        )


NAMES: dict[str, type[Optimizer]] = {"sgd": SGD, "adam": Adam}


def get(value: Any) -> Optimizer:
    """An optimizer from an object or Keras' name ('sgd', 'adam', at their defaults)."""
    if isinstance(value, Optimizer):
        return value
    if isinstance(value, str) and value.lower() in NAMES:
        return NAMES[value.lower()]()
    raise FlexFlowError(
        f"compile: unknown optimizer {value!r}; pass one of {', '.join(NAMES)} or an "
        "optimizer object (flexflow.keras.optimizers.SGD(...), Adam(...))."
    )


__all__ = ["SGD", "Adam", "Optimizer", "get"]
