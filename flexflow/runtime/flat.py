"""Every parameter of a model in one flat float32 buffer, as DDP's gradient buckets do.

Where each device keeps its own copy of every weight (`Executor.updates_in_step`), a step task
names a device's weights, its partial gradients and its optimizer states as one store each
instead of one per parameter: Legate's cost per task grows with its store arguments (about
15 us each to turn into an array in the task, and the runtime's dependence analysis per
argument), and a model's parameter count would multiply it. The task body splits the buffer
back into per-parameter arrays (views, no copies) by this layout, and the optimizer, being
elementwise, updates the whole buffer in one pass, or one pass per run of parameters with the
same L2 regularizer (`runs`). Nothing here imports Legate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class FlatLayout:
    """Per parameter id, its (start, stop) range in the buffer, its shape and its L2
    regularizer's lambda (`flexflow.graph.Parameter.l2`), in parameter order; `size`
    elements in all."""

    ranges: tuple[tuple[int, int], ...]
    shapes: tuple[tuple[int, ...], ...]
    l2: tuple[float, ...] = ()
    """Empty where no parameter has a regularizer."""

    @classmethod
    def of(cls, shapes: Sequence[tuple[int, ...]], l2: Sequence[float] = ()) -> FlatLayout:
        """The layout of parameters 0, 1, ... with these shapes (and L2 lambdas), back to
        back."""
        ranges, start = [], 0
        for shape in shapes:
            stop = start + int(np.prod(shape, dtype=np.int64))
            ranges.append((start, stop))
            start = stop
        lambdas = tuple(float(lam) for lam in l2) if any(l2) else ()
        return cls(tuple(ranges), tuple(tuple(s) for s in shapes), lambdas)

    @property
    def size(self) -> int:
        return self.ranges[-1][1] if self.ranges else 0

    @property
    def runs(self) -> tuple[tuple[int, int, float], ...]:
        """The buffer as (start, stop, lambda) runs of parameters with the same L2 lambda, in
        order: one run of lambda 0 where no parameter has a regularizer. The update goes run
        by run (native/kernels.h `ff_l2_runs`)."""
        if not self.l2:
            return ((0, self.size, 0.0),)
        runs: list[tuple[int, int, float]] = []
        for (start, stop), lam in zip(self.ranges, self.l2, strict=True):
            if runs and runs[-1][2] == lam:
                runs[-1] = (runs[-1][0], stop, lam)
            else:
                runs.append((start, stop, lam))
        return tuple(runs)

    def split(self, flat: np.ndarray, pids: Iterable[int]) -> list[np.ndarray]:
        """Views of parameters `pids` in `flat` (one buffer, 1-D), shaped as the parameters."""
        views = []
        for pid in pids:
            start, stop = self.ranges[pid]
            views.append(flat[start:stop].reshape(self.shapes[pid]))
        return views

    def join(self, values: Sequence[np.ndarray]) -> np.ndarray:
        """One float32 buffer holding `values` (one per parameter, in order)."""
        flat = np.empty(self.size, dtype=np.float32)
        for view, value in zip(self.split(flat, range(len(self.ranges))), values, strict=True):
            view[...] = value
        return flat
