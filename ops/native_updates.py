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
    if isinstance(l2, float | int):
        runs = L2Runs(((weight.size, l2),)) if l2 else None
    else:
        runs = L2Runs([(stop, lam) for _, stop, lam in l2]) if any(r[2] for r in l2) else None
    lib.ff_apply_update_runs_f32(update, ffi.NULL if runs is None else runs.struct)


class L2Runs:
    """An `ff_l2_runs` (native/kernels.h: the L2 regularizers of a flat buffer) of (stop,
    lambda) runs, and the arrays it points at, alive as long as this object."""

    def __init__(self, runs: Sequence[tuple[int, float]]) -> None:
        self._stops = ffi.new("long[]", [int(stop) for stop, _ in runs])
        self._lambdas = ffi.new("float[]", [float(np.float32(lam)) for _, lam in runs])
        self.struct = ffi.new("ff_l2_runs *")
        self.struct.count, self.struct.stop, self.struct.l2 = len(runs), self._stops, self._lambdas
