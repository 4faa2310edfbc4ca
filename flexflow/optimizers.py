"""Optimizers: how a weight tile and its state tiles change given the tile of its gradient.

An optimizer is an immutable value. Its update is element-wise, so it runs on any tiling of a
weight: the runtime keeps each state (momentum, Adam's moments) in a Legate store shaped and
partitioned like its weight and updates every tile where that tile lives, and the result does
not depend on the tiling. `apply` is what the runtime's CPU tasks run: in place on the tiles
(numpy in-place and `out=` operations, reusing the gradient as scratch: few weight-sized
temporaries); `update` is the same arithmetic on copies, the reference the GPU kernels are
checked against; `apply_partials` is what a data-parallel step runs: the devices' partial
gradients summed and the update applied in one pass of C (native/optimizers.c), the same bits
as `apply` to their sum. Both work in float32 like the stores, in a fixed order of operations, so every
tiling gives bit-identical weights.

Each of them takes `l2`, the lambda of the parameter's L2 regularizer
(`flexflow.graph.Parameter.l2`, a dense kernel's kernel_regularizer): the summed gradient
first gains l2 * w, then the optimizer's own weight_decay (g' = (g + l2 * w) + weight_decay *
w), once per step whatever the tiling, as `flexflow.regularizers` explains.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Protocol

import numpy as np

from flexflow.errors import FlexFlowError
from flexflow.ops import native_updates
from flexflow.ops.checks import is_real


class Optimizer(Protocol):
    learning_rate: float

    @property
    def state_names(self) -> tuple[str, ...]: ...

    def apply(
        self,
        weight: np.ndarray,
        grad: np.ndarray,
        states: Sequence[np.ndarray],
        step: int,
        l2: float = 0.0,
    ) -> None:
        """Update number `step` (1, 2, ...) of a float32 weight tile and its state tiles, in
        place, the gradient first gaining `l2` * weight (the module doc); `grad` (float32) is
        scratch space afterwards."""
        ...

    def apply_partials(
        self,
        weight: np.ndarray,
        partials: Sequence[np.ndarray],
        states: Sequence[np.ndarray],
        step: int,
        l2: L2 = 0.0,
    ) -> None:
        """`apply` with the gradient `sum_in_order(partials)` (the devices' partial gradients,
        each shaped like the weight) and the L2 lambda `l2` (or a flat buffer's runs), in one
        pass where the arrays allow it; bit-identical to `apply` either way."""
        ...

    def native_update(self, step: int) -> tuple[int, tuple[np.float32, ...]]:
        """Update number `step` as native/optimizers.c runs it: its kind
        (flexflow.ops.native_updates.UPDATE_*) and float32 hyperparameters, in the order
        ff_update takes them."""
        ...

    def update(
        self,
        weight: np.ndarray,
        grad: np.ndarray,
        states: Sequence[np.ndarray],
        step: int,
        l2: float = 0.0,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """The new weight tile and state tiles after update number `step` (with the
        parameter's L2 lambda `l2`), as new arrays."""
        ...

    def to_json(self) -> dict: ...


def sum_in_order(partials: Sequence[np.ndarray]) -> np.ndarray:
    """partials[0] + partials[1] + ..., left to right in device order, so every tiling sums a
    weight's gradient the same way; plain adds are a third faster than numpy's axis-0
    reduction on a large weight."""
    if len(partials) == 1:
        return partials[0].copy()  # the optimizer uses its gradient as scratch
    total = np.add(partials[0], partials[1])
    for partial in partials[2:]:
        total += partial
    return total


L2 = float | Sequence[tuple[int, int, float]]
"""A weight's L2 lambda, or (start, stop, lambda) runs covering a flat buffer of several
weights (`flexflow.runtime.flat.FlatLayout.runs`)."""


def _apply_partials(optimizer: Optimizer, weight, partials, states, step: int, l2: L2) -> None:
    """`apply_partials` in one pass of C where the arrays allow it (a flat buffer's runs too:
    one call, not one per run), else numpy's `apply`, run by run."""
    if native_updates.updatable_in_place(weight, partials, *states):
        update = optimizer.native_update(step)
        native_updates.apply_update(*update, weight, partials, states, l2)
        return
    for start, stop, lam in native_updates.l2_runs(l2, weight.size):
        run = slice(start, stop)
        grad = sum_in_order([p[run] for p in partials])
        optimizer.apply(weight[run], grad, [s[run] for s in states], step, lam)


def _update_copies(
    optimizer: Optimizer, weight, grad, states: Sequence, step: int, l2: float
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """`optimizer.apply` on float32 copies: the new weight and states, the arguments untouched."""
    new_weight = np.array(weight, dtype=_F32)
    new_states = tuple(np.array(state, dtype=_F32) for state in states)
    optimizer.apply(new_weight, np.array(grad, dtype=_F32), new_states, step, l2)
    return new_weight, new_states


def _decayed(grad: np.ndarray, weight: np.ndarray, l2: float, weight_decay: float) -> None:
    """grad += l2 * weight (the parameter's L2 regularizer), then grad += weight_decay *
    weight (the optimizer's), in float32 and in that order, as native/optimizers.c and the
    GPU kernels add them."""
    if l2:
        grad += _F32(l2) * weight
    if weight_decay:
        grad += _F32(weight_decay) * weight


_BOUNDS: dict[str, tuple[Callable[[float], bool], str]] = {
    # each hyperparameter's rule: (test, what it must be)
    "learning_rate": (lambda v: 0 < v < math.inf, "a positive number"),
    "epsilon": (lambda v: 0 < v < math.inf, "a positive number"),
    "weight_decay": (lambda v: 0 <= v < math.inf, "a number >= 0"),
    "momentum": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "beta1": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "beta2": (lambda v: 0 <= v < 1, "in [0, 1)"),
}


def _check(name: str, **values: float) -> None:
    """Raise FlexFlowError naming the first hyperparameter outside its rule (`_BOUNDS`); a
    string or None is refused before it is compared (it was a TypeError)."""
    for key, value in values.items():
        test, bound = _BOUNDS[key]
        if not (is_real(value) and test(value)):
            raise FlexFlowError(f"{name}: {key} must be {bound}, got {value!r}.")


_F32 = np.float32


def _not_a_model(kind: str, learning_rate) -> None:
    """FlexFlow's optimizers take the model first (`SGDOptimizer(ffmodel, 0.01)`); ours are
    values of their hyperparameters alone."""
    if type(learning_rate).__name__ == "FFModel":
        raise FlexFlowError(
            f"{kind} takes no model: FlexFlow's {kind}(ffmodel, lr, ...) is {kind}(lr, ...) "
            f"here, its other hyperparameters by keyword; compile(optimizer) or "
            f"model.optimizer = ... gives it to the model."
        )


@dataclass(frozen=True, slots=True)
class SGDOptimizer:
    """SGD with optional (Nesterov) momentum and L2 weight decay, as PyTorch defines them:
    g' = g + weight_decay * w; v = momentum * v + g'; w -= lr * (g' + momentum * v if nesterov
    else v). With momentum 0 there is no state and w -= lr * g'."""

    learning_rate: float = 0.01
    _: KW_ONLY  # FlexFlow's order differs: (lr, momentum, nesterov, weight_decay)
    momentum: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        _not_a_model("SGDOptimizer", self.learning_rate)
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

    def apply(self, weight, grad, states, step, l2=0.0):
        lr, mu = _F32(self.learning_rate), _F32(self.momentum)
        _decayed(grad, weight, l2, self.weight_decay)
        direction = grad
        if mu:
            velocity = states[0]
            velocity *= mu
            velocity += grad
            if self.nesterov:
                grad += mu * velocity
            else:
                direction = velocity
        weight -= np.multiply(direction, lr, out=grad)

    def apply_partials(self, weight, partials, states, step, l2=0.0):
        _apply_partials(self, weight, partials, states, step, l2)

    def native_update(self, step):
        hyper = (self.learning_rate, self.momentum, self.weight_decay, float(self.nesterov))
        return native_updates.UPDATE_SGD, tuple(_F32(value) for value in hyper)

    def update(self, weight, grad, states, step, l2=0.0):
        return _update_copies(self, weight, grad, states, step, l2)

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
    _: KW_ONLY  # FlexFlow's order differs: (alpha, beta1, beta2, weight_decay, epsilon)
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        _not_a_model("AdamOptimizer", self.learning_rate)
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

    def apply(self, weight, grad, states, step, l2=0.0):
        b1, b2 = _F32(self.beta1), _F32(self.beta2)
        _decayed(grad, weight, l2, self.weight_decay)
        m, v = states
        m *= b1
        m += (_F32(1) - b1) * grad
        v *= b2
        grad_squared = np.multiply(_F32(1) - b2, grad)
        v += np.multiply(grad_squared, grad, out=grad_squared)
        step_size = np.divide(m, _F32(1 - self.beta1**step), out=grad)  # m_hat
        step_size *= _F32(self.learning_rate)
        denominator = np.divide(v, _F32(1 - self.beta2**step), out=grad_squared)  # v_hat
        np.sqrt(denominator, out=denominator)
        denominator += _F32(self.epsilon)
        weight -= np.divide(step_size, denominator, out=step_size)

    def apply_partials(self, weight, partials, states, step, l2=0.0):
        _apply_partials(self, weight, partials, states, step, l2)

    def native_update(self, step):
        hyper = (self.learning_rate, self.beta1, self.beta2, self.epsilon, self.weight_decay)
        corrections = (1 - self.beta1**step, 1 - self.beta2**step)
        return native_updates.UPDATE_ADAM, tuple(_F32(value) for value in (*hyper, *corrections))

    def update(self, weight, grad, states, step, l2=0.0):
        return _update_copies(self, weight, grad, states, step, l2)

    def to_json(self) -> dict:
        return {
            "type": "adam",
            "learning_rate": self.learning_rate,
            "beta1": self.beta1,
            "beta2": self.beta2,
            "epsilon": self.epsilon,
            "weight_decay": self.weight_decay,
        }


def same_kind(a: Optimizer, b: Optimizer) -> bool:
    """Whether `b` can take over `a`'s states: the same class with the same state arrays."""
    return type(a) is type(b) and a.state_names == b.state_names


OPTIMIZERS = {"sgd": SGDOptimizer, "adam": AdamOptimizer}
"""The optimizers by the name `to_json` records and `compile` takes (Keras' names)."""


def chosen_optimizer(optimizer: Optimizer | str | None, learning_rate: float) -> Optimizer:
    """`optimizer` itself, or the one it names ("sgd", "adam") at `learning_rate`; None is SGD
    at `learning_rate`. Refuses anything else, naming what it takes."""
    if optimizer is None:
        optimizer = "sgd"
    if isinstance(optimizer, str):
        kind = OPTIMIZERS.get(optimizer.lower())
        if kind is None:
            raise FlexFlowError(
                f"unknown optimizer '{optimizer}'; name one of {', '.join(OPTIMIZERS)} or pass "
                "an SGDOptimizer(...) or AdamOptimizer(...)."
            )
        return kind(learning_rate)
    if not isinstance(optimizer, tuple(OPTIMIZERS.values())):
        raise FlexFlowError(
            f"the optimizer must be an SGDOptimizer or AdamOptimizer (or its name: "
            f"{', '.join(OPTIMIZERS)}), got {type(optimizer).__name__}."
        )
    return optimizer


def optimizer_from_json(data: dict) -> Optimizer:
    """The optimizer `to_json` described (checkpoints record it)."""
    kinds = OPTIMIZERS
    fields = dict(data)
    kind = fields.pop("type", None)
    if kind not in kinds:
        raise FlexFlowError(f"unknown optimizer type {kind!r}; expected one of {sorted(kinds)}.")
    try:
        return kinds[kind](**fields)
    except TypeError as exc:
        raise FlexFlowError(f"optimizer {kind}: {exc}") from None
