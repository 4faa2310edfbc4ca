"""MCMC chains run at once in forked worker processes (`search(..., workers=N)`).

Each worker is forked from the search's process, so it starts with the simulation context and
the chain's start in memory; it sends the chain's progress and result back on a queue. Use it
only in a process that runs no Legate runtime (the `flexflow` command, not a training script).
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable, Sequence

from flexflow.search.mcmc import ChainResult, ChainStatus
from flexflow.strategy import Strategy

ChainRun = Callable[..., ChainResult]
"""run(index, name, start, on_status, clock) -> the chain's result."""


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
