"""The in-memory all-reduce of batch statistics between the points of one concurrent launch.

Its own module, with no Legate import: the step profiler (`flexflow.step_profiler`) runs the
C steps of a data-parallel split in threads, their batch norms exchanging statistics through
it, without starting the Legate runtime; the runtime's concurrent launches
(`flexflow.runtime.concurrent`) use the same exchange.
"""

from __future__ import annotations

import numpy as np

from flexflow._kernels import ffi, lib
from flexflow.errors import StrategyError
from flexflow.ops.native_norms import EXCHANGE_TIMEOUT_S, exchange_failed


class StatisticsExchange:
    """The in-memory all-reduce of one executor's concurrent launches: every point hands in its
    partial sums and gets back their sum, taken in point order (the same bits on every point).
    In C (native/exchange.c): a batch norm's training passes call it inside their kernels'
    call (`pointer`), without the interpreter lock."""

    def __init__(self, points: int) -> None:
        if not 1 <= points <= lib.FF_EXCHANGE_MAX_POINTS:
            raise StrategyError(
                f"a concurrent launch exchanging batch statistics has {points} points; it "
                f"takes 1 to {lib.FF_EXCHANGE_MAX_POINTS} (split such a group over fewer CPUs)."
            )
        self.points = points
        self.pointer = ffi.gc(lib.ff_exchange_new(points), lib.ff_exchange_free)
        """The cffi ff_exchange pointer the C kernels take."""
        if self.pointer == ffi.NULL:
            raise MemoryError(f"no memory for a statistics exchange of {points} points")

    def all_sum(self, point: int, partial: np.ndarray) -> np.ndarray:
        """The sum over the points of their float64 `partial`s, as point `point`."""
        partial = np.ascontiguousarray(partial, dtype=np.float64)
        total = np.empty_like(partial)
        status = lib.ff_exchange_sum(
            self.pointer, point, ffi.from_buffer("double[]", partial),
            ffi.from_buffer("double[]", total), partial.size, EXCHANGE_TIMEOUT_S,
        )  # fmt: skip
        if status < 0:
            raise exchange_failed(status)
        return total

    def abort(self) -> None:
        """A point failed: the others stop waiting for it (their exchanges raise)."""
        lib.ff_exchange_abort(self.pointer)
