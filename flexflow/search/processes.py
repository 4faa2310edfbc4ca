"""MCMC chains run at once in forked worker processes (`search(..., workers=N)`).

Each worker is forked from the search's process, so it starts with the simulation context and
the chain's start in memory; it sends the chain's progress and result back on a queue. Use it
only in a process that runs no Legate runtime (the `flexflow` command, not a training script).
"""

from __future__ import annotations

import ctypes
import math
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from flexflow.search.mcmc import ChainResult, ChainStatus
from flexflow.strategy import Strategy

ChainRun = Callable[..., ChainResult]
"""run(index, name, start, on_status, clock) -> the chain's result."""

WORKER_MEMORY_BYTES = 4 << 30
"""Memory set aside per worker by `auto_workers`: a forked worker's simulation caches grow to
about the search process's own size (3.6 GiB at the peak for Inception-v3 on 64 K80s)."""


CGROUP_ROOT = Path("/sys/fs/cgroup")
"""Where a container's limits are read (cgroup v2 files at the root, v1 in controller folders):
a Docker container's `--cpus` and `--memory` do not show in the affinity mask or meminfo."""

_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge number


def usable_cores(cgroup: Path = CGROUP_ROOT) -> int:
    """The cores this process may run on: its affinity mask, less where a cgroup CPU quota
    (a container's `--cpus`) allows fewer."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    quota = _read_numbers(cgroup / "cpu.max")  # v2: "<quota> <period>" or "max <period>"
    if quota is None:  # v1: quota and period in two files, quota -1 for none
        v1_quota = _read_numbers(cgroup / "cpu" / "cpu.cfs_quota_us")
        period = _read_numbers(cgroup / "cpu" / "cpu.cfs_period_us")
        quota = (v1_quota or ()) + (period or ())
    if len(quota) == 2 and quota[0] > 0 and quota[1] > 0:
        cores = min(cores, max(1, math.ceil(quota[0] / quota[1])))
    return cores


def available_memory_bytes(
    meminfo: Path = Path("/proc/meminfo"), cgroup: Path = CGROUP_ROOT
) -> int | None:
    """Memory new work can use without swapping: the kernel's estimate, less where a cgroup
    limit (a container's `--memory`) leaves less headroom; None where neither is known."""
    available = None
    try:
        with open(meminfo) as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    for limit_file, usage_file in (
        (cgroup / "memory.max", cgroup / "memory.current"),
        (cgroup / "memory" / "memory.limit_in_bytes", cgroup / "memory" / "memory.usage_in_bytes"),
    ):
        limit, usage = _read_numbers(limit_file), _read_numbers(usage_file)
        if limit and usage and 0 < limit[0] < _UNLIMITED:
            headroom = max(0, limit[0] - usage[0])
            available = headroom if available is None else min(available, headroom)
            break
    return available


def _read_numbers(path: Path) -> tuple[int, ...] | None:
    """The integers of a one-line cgroup file ("max" reads as none); None if unreadable."""
    try:
        words = path.read_text().split()
    except OSError:
        return None
    try:
        return tuple(int(word) for word in words if word != "max")
    except ValueError:
        return None


def auto_workers(cores: int | None = None, available: int | None = None) -> int:
    """Workers for `--workers auto`: one per usable core, no more than the available memory
    holds at WORKER_MEMORY_BYTES each, and at least one (the search's own process)."""
    cores = usable_cores() if cores is None else cores
    available = available_memory_bytes() if available is None else available
    if available is None:
        return cores
    return max(1, min(cores, available // WORKER_MEMORY_BYTES))


PR_SET_PDEATHSIG = 1
"""Linux's prctl option: the signal a process gets when its parent exits."""


def die_with_parent(parent: int) -> None:
    """In a forked worker: end when the search's process `parent` ends, however it ends (a
    SIGTERM or SIGKILL runs none of its cleanup; an orphaned worker went on holding memory
    and its caller's stdout pipe, blocked on a queue nobody read: a helper's run). Linux
    only: elsewhere the parent's cleanup alone stops workers."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the CLI's handler (`cli.main`)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent stops its workers
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (not Linux)
        return
    if os.getppid() != parent:  # it ended before prctl took effect
        os._exit(1)


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
                    target=_serve, args=(queue, run, index, name, start, os.getpid()), daemon=True
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


def _serve(queue, run: ChainRun, index: int, name: str, start: Strategy, parent: int) -> None:
    die_with_parent(parent)
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
