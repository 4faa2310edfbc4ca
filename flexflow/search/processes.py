"""MCMC chains run at once in forked worker processes (`search(..., workers=N)`).

Each worker is forked from the search's process, so it starts with the simulation context and
the chain's start in memory; it sends the chain's progress and result back on a queue. Use it
only in a process that runs no Legate runtime (the `flexflow` command, not a training script).
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from collections.abc import Callable, Sequence

from flexflow.search.mcmc import ChainResult, ChainStatus
from flexflow.strategy import Strategy

ChainRun = Callable[..., ChainResult]
"""run(index, name, start, on_status, clock) -> the chain's result."""

WORKER_MEMORY_BYTES = 4 << 30
"""Memory set aside per worker by `auto_workers`: a forked worker's simulation caches grow to
about the search process's own size (3.6 GiB at the peak for Inception-v3 on 64 K80s)."""


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def available_memory_bytes() -> int | None:
    """Memory the kernel says new work can use without swapping (None: not known here)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def auto_workers(cores: int | None = None, available: int | None = None) -> int:
    """Workers for `--workers auto`: one per usable core, no more than the available memory
    holds at WORKER_MEMORY_BYTES each, and at least one (the search's own process)."""
    cores = usable_cores() if cores is None else cores
    available = available_memory_bytes() if available is None else available
    if available is None:
        return cores
    return max(1, min(cores, available // WORKER_MEMORY_BYTES))


def run_in_processes(
    starts: Sequence[tuple[str, Strategy]],
    run: ChainRun,
    workers: int,
    on_status: Callable[[ChainStatus], None] | None = None,
) -> tuple[list[ChainResult], list[float]]:
    """Every chain of `starts`, at most `workers` at a time; their results in the order of
    `starts` and the `time.perf_counter` at which each started."""
    forking = multiprocessing.get_context("fork")
    queue = forking.Queue()
    waiting = list(enumerate(starts))
    running: dict[int, multiprocessing.process.BaseProcess] = {}
    results: dict[int, ChainResult] = {}
    started: dict[int, float] = {}
    try:
        while waiting or running:
            while waiting and len(running) < workers:
                index, (name, start) = waiting.pop(0)
                process = forking.Process(
                    target=_serve, args=(queue, run, index, name, start), daemon=True
                )
                started[index] = time.perf_counter()
                process.start()
                running[index] = process
            kind, index, value = queue.get()
            if kind == "status":
                if on_status is not None:
                    on_status(value)
            elif kind == "done":
                results[index] = value
                running.pop(index).join()
            else:
                raise RuntimeError(f"an MCMC chain's process failed:\n{value}")
    finally:
        for process in running.values():
            process.terminate()
    return [results[i] for i in range(len(starts))], [started[i] for i in range(len(starts))]


def _serve(queue, run: ChainRun, index: int, name: str, start: Strategy) -> None:
    try:
        result = run(
            index,
            name,
            start,
            lambda status: queue.put(("status", index, status)),
            time.perf_counter,
        )
        queue.put(("done", index, result))
    except BaseException:
        queue.put(("error", index, traceback.format_exc()))
