"""How benchmarks time training iterations on Legate: whole blocks, fenced on both sides."""

from __future__ import annotations

import os
import time

LOSS = "sparse_categorical_crossentropy"


def timed_block(executor, inputs, target, iterations: int) -> tuple[float, float]:
    """(start, end) perf_counter seconds of `iterations` training iterations issued back to
    back: every task before the block has finished when it starts, and every task of the
    block when it ends (Legate runs tasks asynchronously)."""
    executor.runtime.issue_execution_fence(block=True)
    begin = time.perf_counter()
    # `steps_per_launch` of them per Legate launch (one each unless the executor was made with
    # steps_per_execution > 1)
    executor.train_batches([(inputs, target, None)] * iterations, LOSS)[-1].read()
    executor.runtime.issue_execution_fence(block=True)
    return begin, time.perf_counter()


def thread_cpu_s() -> dict[int, float]:
    """CPU seconds (user + system) each thread of this process has used, by Linux thread id
    (`threading.get_native_id()`; the main thread's is the process id); empty where /proc is
    not there to read."""
    tick = os.sysconf("SC_CLK_TCK")
    used = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        used[int(tid)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return used
