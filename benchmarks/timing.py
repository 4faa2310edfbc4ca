"""How benchmarks time training iterations on Legate: whole blocks, fenced on both sides."""

from __future__ import annotations

import time

LOSS = "sparse_categorical_crossentropy"


def timed_block(executor, inputs, target, iterations: int) -> tuple[float, float]:
    """(start, end) perf_counter seconds of `iterations` training iterations issued back to
    back: every task before the block has finished when it starts, and every task of the
    block when it ends (Legate runs tasks asynchronously)."""
    executor.runtime.issue_execution_fence(block=True)
    begin = time.perf_counter()
    for _ in range(iterations):
        stats = executor.train_batch(inputs, target, LOSS)
    stats.read()
    executor.runtime.issue_execution_fence(block=True)
    return begin, time.perf_counter()
