"""How benchmarks time training iterations on Legate: whole blocks, fenced on both sides."""

from __future__ import annotations

import os

LOSS = "sparse_categorical_crossentropy"


def timed_block(executor, inputs, target, iterations: int) -> tuple[float, float]:
    """(start, end) perf_counter seconds of `iterations` training iterations issued back to
    back, `steps_per_launch` of them per Legate launch, as `fit` issues them: every task
    before the block has finished when it starts, and every task of the block when it ends
    (`flexflow.runtime.trials.timed_iterations`, which compile's trials time with)."""
    from flexflow.runtime.trials import timed_iterations  # in the Legate process only

    return timed_iterations(executor, inputs, target, LOSS, iterations)


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
