"""Calls into the C dropout (native/step.c): a float32 tile through its op's mask, as flexflow.ops.dropout draws it."""

from __future__ import annotations

import numpy as np

from flexflow._kernels import lib

from .native_args import f32, floats


def dropout(stream: int, rate: float, base: int, x: np.ndarray) -> np.ndarray:
    """x through flexflow.ops.dropout's mask for the stream keyed by `stream` (the op's seed),
    x's values following on from index `base` of the whole tensor (a tile of whole samples):
    float32, rounded from the float64 products as numpy's path rounds them when stored."""
    x = f32(x)
    y = np.empty_like(x)
    lib.ff_dropout_f32(stream, rate, base, floats(x), floats(y), x.size)
    return y
