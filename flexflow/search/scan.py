"""Scanning an op's neighbours: every configuration of one op tried against the current strategy.

Local descent and check-local (paper §8.4) spend nearly all their time here: a 16-GPU model
has tens of thousands of single-op neighbours, a 64-GPU one near a million. `SerialScanner`
scans in this process; `PoolScanner` scans several ops at once in worker processes (forked, so
each starts with a copy of the simulation context), each holding its own evaluator of the same
strategy, an op to each worker as soon as it is free (ops' scans take very different times).
Both give the same answers: a scan depends only on the strategy it starts from, and changes
(`apply`) reach every worker.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import os
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from flexflow.search.collector import fewer_collections
from flexflow.search.evaluator import Evaluator, FullEvaluator, make_evaluator
from flexflow.search.processes import die_with_parent
from flexflow.search.spaces import Space
from flexflow.simulator import SimContext
from flexflow.strategy import ParallelConfig, Strategy

RELATIVE_TOLERANCE = 1e-9  # a neighbour must be faster by more than rounding noise
PROGRESS_EVERY = 64  # simulations between two progress calls of a serial scan
PROGRESS_S = 0.5  # seconds between two progress calls while a pool's scans run


@dataclass(frozen=True, slots=True)
class OpScan:
    """One op's configurations tried against a strategy (which the scan leaves as it was)."""

    op: int
    best: ParallelConfig
    """The fastest configuration (each faster than the last by more than the tolerance, in
    the space's order); the op's own when none is faster."""
    best_s: float
    faster: tuple[tuple[ParallelConfig, float], ...]
    """Every configuration faster than the strategy, with its cost, in the space's order."""
    finished: bool
    """False: the deadline came first; `best` and `faster` cover the configurations tried."""


def scan_op(
    evaluator: Evaluator | FullEvaluator,
    op: int,
    configs: Iterable[ParallelConfig],
    stop: Callable[[], bool] = lambda: False,
    simulated: Callable[[], None] | None = None,
) -> OpScan:
    """Try the configurations `configs` of `op` (all of its space, or a descent's narrower
    choice), each a delta simulation from the one before (delta simulation gives the same
    times whatever the path), then give the op its own back once:
    half the simulations of reverting each one. A configuration's simulation stops as soon as
    its lower bounds pass the strategy's cost (`DeltaSimulator.change_many`'s cutoff): most
    neighbours of a good strategy are slower, and the bounds show it early. `stop()` is asked
    before each configuration, `simulated()` told after each simulation."""
    start, base = evaluator.strategy[op], evaluator.cost_s
    best, best_s = start, base
    faster = []
    finished = True
    for config in configs:
        if stop():
            finished = False
            break
        if config == start:
            continue
        # only whether it beats the strategy matters: a slower one is cut off and taken back
        cost = evaluator.propose(op, config, cutoff=base)
        if cost == math.inf:
            evaluator.revert()
        if simulated is not None:
            simulated()
        if cost < base * (1 - RELATIVE_TOLERANCE):
            faster.append((config, cost))
        if cost < best_s * (1 - RELATIVE_TOLERANCE):
            best, best_s = config, cost
    settle(evaluator, op, start)
    return OpScan(op, best, best_s, tuple(faster), finished)


def settle(evaluator: Evaluator | FullEvaluator, op: int, config: ParallelConfig) -> float:
    """Give `op` the configuration `config` unless it has it; the cost either way."""
    if evaluator.strategy[op] != config:
        return evaluator.propose(op, config)
    return evaluator.cost_s


class SerialScanner:
    """Scans one op at a time in this process: `start` an op, then `result` scans it."""

    width = 1

    def __init__(
        self,
        context: SimContext,
        strategy: Strategy,
        space: Space,
        simulation: str = "delta",
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._evaluator = make_evaluator(context, strategy, simulation)
        self._space, self._clock = space, clock
        self._pending: tuple[int, Sequence[ParallelConfig] | None] | None = None
        self.deadline: float | None = None
        """Scans stop (unfinished) once `clock()` passes it."""
        self.on_progress: Callable[[], None] | None = None
        """Called now and then while a scan runs (every PROGRESS_EVERY simulations here)."""
        self.simulations = 0
        """Neighbours simulated by every scan so far."""

    @property
    def strategy(self) -> Strategy:
        return self._evaluator.strategy

    @property
    def cost_s(self) -> float:
        return self._evaluator.cost_s

    @property
    def idle(self) -> int:
        return int(self._pending is None)

    @property
    def busy(self) -> int:
        return 1 - self.idle

    def start(self, op: int, configs: Sequence[ParallelConfig] | None = None) -> None:
        """Scan `op` next: `configs`, or every configuration of its space when None."""
        if self._pending is not None:
            raise AssertionError("start() while a scan is pending")
        self._pending = (op, configs)

    def result(self) -> OpScan:
        pending, self._pending = self._pending, None
        if pending is None:
            raise AssertionError("result() without a scan started")
        op, configs = pending
        deadline, clock = self.deadline, self._clock

        def simulated() -> None:
            self.simulations += 1
            if self.on_progress is not None and self.simulations % PROGRESS_EVERY == 0:
                self.on_progress()

        return scan_op(
            self._evaluator,
            op,
            self._space(op) if configs is None else configs,
            lambda: deadline is not None and clock() > deadline,
            simulated,
        )

    def cancel(self) -> None:
        self._pending = None

    def apply(self, op: int, config: ParallelConfig) -> float:
        return settle(self._evaluator, op, config)

    def close(self) -> None:
        pass

    def __enter__(self) -> SerialScanner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class PoolScanner:
    """Scans up to `workers` ops at once, one per worker process: `start` gives an op to an
    idle worker, `result` waits for the next scan to end (in the order they end), `cancel`
    stops the scans under way and drops them.

    Workers are forked: use it only in a process that runs no Legate runtime (the `flexflow`
    command, not a training script). The deadline is read on `time.perf_counter`, which every
    process of the host shares."""

    def __init__(
        self,
        context: SimContext,
        strategy: Strategy,
        space: Space,
        workers: int,
        simulation: str = "delta",
    ) -> None:
        forking = multiprocessing.get_context("fork")
        self.width = workers
        self.deadline: float | None = None
        self._abandon = forking.Event()  # set: the scans under way stop at once
        self.on_progress: Callable[[], None] | None = None
        """Called every PROGRESS_S seconds while `result` waits."""
        self._counts = [forking.Value("q", 0, lock=False) for _ in range(workers)]
        """Neighbours each worker has simulated (only it writes its own)."""
        self._connections: list[multiprocessing.connection.Connection] = []
        self._processes: list[multiprocessing.process.BaseProcess] = []
        for count in self._counts:
            parent, child = forking.Pipe()
            process = forking.Process(
                target=_serve,
                args=(
                    child,
                    context,
                    strategy,
                    space,
                    simulation,
                    self._abandon,
                    count,
                    os.getpid(),
                ),
                daemon=True,
            )
            process.start()
            child.close()
            self._connections.append(parent)
            self._processes.append(process)
        self._idle = list(self._connections)
        self.strategy = strategy
        self.cost_s = [self._receive(c) for c in self._connections][0]  # each worker's start

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def busy(self) -> int:
        return self.width - len(self._idle)

    @property
    def simulations(self) -> int:
        """Neighbours simulated by every scan so far (those under way included)."""
        return sum(count.value for count in self._counts)

    def start(self, op: int, configs: Sequence[ParallelConfig] | None = None) -> None:
        """Give `op` to an idle worker: `configs`, or every configuration of its space."""
        if not self._idle:
            raise AssertionError(f"start({op}) with every worker busy; take a result() first")
        connection = self._idle.pop()
        connection.send(("scan", op, (self.deadline, configs)))

    def result(self) -> OpScan:
        busy = [c for c in self._connections if c not in self._idle]
        if not busy:
            raise AssertionError("result() without a scan started")
        ready = multiprocessing.connection.wait(busy, PROGRESS_S)
        while not ready:
            if self.on_progress is not None:
                self.on_progress()
            ready = multiprocessing.connection.wait(busy, PROGRESS_S)
        connection = ready[0]
        self._idle.append(connection)
        return self._receive(connection)

    def cancel(self) -> None:
        self._abandon.set()
        while self.busy:
            self.result()
        self._abandon.clear()

    def apply(self, op: int, config: ParallelConfig) -> float:
        if self.busy:
            raise AssertionError("apply() while scans are under way; cancel() them first")
        for connection in self._connections:
            connection.send(("apply", op, config))
        costs = [self._receive(connection) for connection in self._connections]
        self.strategy = self.strategy.replace(op, config)
        self.cost_s = costs[0]
        return self.cost_s

    def close(self) -> None:
        for connection in self._connections:
            try:
                connection.send(None)
            except (BrokenPipeError, OSError):
                pass
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
        self._connections, self._processes, self._idle = [], [], []

    def __enter__(self) -> PoolScanner:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @staticmethod
    def _receive(connection):
        kind, value = connection.recv()
        if kind == "error":
            raise RuntimeError(f"a scan worker failed:\n{value}")
        return value


def _serve(
    connection,
    context: SimContext,
    strategy: Strategy,
    space: Space,
    simulation: str,
    abandon,
    count,
    parent: int,
) -> None:
    """A worker: its own evaluator of the strategy; scans ops and applies changes on request."""
    die_with_parent(parent)
    try:
        _answer(connection, context, strategy, space, simulation, abandon, count)
    except EOFError:  # the parent went away
        pass
    except BaseException:
        connection.send(("error", traceback.format_exc()))


@fewer_collections()
def _answer(connection, context, strategy, space, simulation, abandon, count) -> None:
    """`_serve`'s loop: answer the parent's requests until it sends None."""
    evaluator = make_evaluator(context, strategy, simulation)
    connection.send(("ok", evaluator.cost_s))
    while (message := connection.recv()) is not None:
        kind, op, value = message
        if kind == "apply":
            connection.send(("ok", settle(evaluator, op, value)))
            continue

        deadline, configs = value

        def stop(deadline=deadline) -> bool:
            return abandon.is_set() or (deadline is not None and time.perf_counter() > deadline)

        def simulated() -> None:
            count.value += 1

        configs = space(op) if configs is None else configs
        connection.send(("ok", scan_op(evaluator, op, configs, stop, simulated)))


def make_scanner(
    context: SimContext,
    strategy: Strategy,
    space: Space,
    workers: int = 1,
    simulation: str = "delta",
    clock: Callable[[], float] = time.perf_counter,
) -> SerialScanner | PoolScanner:
    """A scanner of `strategy`'s neighbours: in this process, or in `workers` processes (no
    more than the graph has ops: each scans one op at a time)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    workers = min(workers, len(context.graph.ops))
    if workers == 1:
        return SerialScanner(context, strategy, space, simulation, clock)
    return PoolScanner(context, strategy, space, workers, simulation)
