"""Calls into the C optimizer updates (native/optimizers.c): SGD and Adam in place on float32 weights."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flexflow._kernels import ffi, lib

from .native_args import F32_POINTER, pointer


def updatable_in_place(weight: np.ndarray, partials: Sequence[np.ndarray], *states) -> bool:
    """Whether the C updates take these arrays: float32, C-contiguous, every partial gradient
    and state shaped like the weight. Other layouts (a strided tile of a weight) go through
    numpy."""
    arrays = (weight, *partials, *states)
    return (
        len(partials) > 0
        and all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)
        and all(a.shape == weight.shape for a in arrays)
        and weight.flags.writeable
    )


def _pointers(arrays: Sequence[np.ndarray]):
    """A C array of float pointers to `arrays` (keep the result alive during the call)."""
    return ffi.new("float *[]", [pointer(a, F32_POINTER) for a in arrays])


UPDATE_SGD, UPDATE_ADAM = lib.FF_UPDATE_SGD, lib.FF_UPDATE_ADAM
"""The kinds of C update (ff_update.kind): SGD's hyperparameters (lr, momentum, weight decay,
nesterov), Adam's (lr, beta1, beta2, epsilon, weight decay, correction1, correction2)."""


def apply_update(
    kind: int,
    hyper: Sequence[float],
    weight,
    partials,
    states,
    l2: float | Sequence[tuple[int, int, float]] = 0.0,
) -> None:
    """Update `weight` in place from the partial gradients' sum and its `states` (SGD: the
    velocity, if any; Adam: m and v), the gradient first gaining `l2` * weight (its L2
    regularizer; or per (start, stop, lambda) run of a flat buffer of several weights), in one
    pass of native/optimizers.c: the bits of flexflow.optimizers' numpy `apply`. Arrays as
    `updatable_in_place` accepts them."""
    update = ffi.new("ff_update *")
    update.kind, update.n, update.copies = kind, weight.size, len(partials)
    update.weight = pointer(weight, F32_POINTER)
    keep = _pointers(partials)  # alive until the call returns
    update.partials = keep
    if len(states) > 0:
        update.state0 = pointer(states[0], F32_POINTER)
    if len(states) > 1:
        update.state1 = pointer(states[1], F32_POINTER)
    update.h = [float(value) for value in hyper] + [0.0] * (7 - len(hyper))
    runs = L2Runs.of(l2_runs(l2, weight.size))
    lib.ff_apply_update_runs_f32(update, ffi.NULL if runs is None else runs.struct)


def l2_runs(
    l2: float | Sequence[tuple[int, int, float]], size: int
) -> Sequence[tuple[int, int, float]]:
    """A weight's L2 lambda as the one (start, stop, lambda) run over its `size` elements, or a
    flat buffer's runs (`flexflow.runtime.flat.FlatLayout.runs`) as they are."""
    return ((0, size, l2),) if isinstance(l2, float | int) else l2


class L2Runs:
    """An `ff_l2_runs` (native/kernels.h: the L2 regularizers of a flat buffer) of (start,
    stop, lambda) runs (`l2_runs`), and the arrays it points at, alive as long as this
    object."""

    def __init__(self, runs: Sequence[tuple[int, int, float]]) -> None:
        self._stops = ffi.new("long[]", [int(stop) for _, stop, _ in runs])
        self._lambdas = ffi.new("float[]", [float(np.float32(lam)) for _, _, lam in runs])
        self.struct = ffi.new("ff_l2_runs *")
        self.struct.count, self.struct.stop, self.struct.l2 = len(runs), self._stops, self._lambdas

    @classmethod
    def of(cls, runs: Sequence[tuple[int, int, float]]) -> L2Runs | None:
        """The runs' struct, or None (the C update's NULL) where no lambda is set."""
        return cls(runs) if any(lam for _, _, lam in runs) else None
