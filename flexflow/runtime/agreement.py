"""One strategy for every rank of a run: each rank's pick offered, all keep the same one.

Why: under `legate --nodes N` (or `--ranks-per-node`) every process runs the script and plans
by itself, and a search stops on its own clock: ranks that made different numbers of proposals
may pick different strategies, and ranks issuing different tasks hang or corrupt the run. So
each rank searches with its own seed (the run's seed plus its rank: N searches instead of one
search N times), offers its pick with its simulated time, and every rank keeps the fastest
simulated, ties to the lowest rank.

The offers travel through Legate (`gather_rows`; the rest of this module needs no Legate):
one task per CPU processor of the run writes its process's
offer into its rank's row of a table, with a MAX reduction over a table filled with -inf, and
every rank reads the table back. Strategies travel as rows of float64 (`encode`), whose
integers are exact.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from flexflow.errors import StrategyError
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.strategy import ParallelConfig, Strategy

OFFERS: dict[int, np.ndarray] = {}
"""This process's rows by agreement id, for the offer task's body (Legate hands it only
stores and scalars), as `flexflow.runtime.task_context.EXECUTORS` does for executors."""
_IDS = itertools.count()


def row_length(graph: OperatorGraph, machine: Machine) -> int:
    """The length of every rank's row for `graph` on `machine`: the simulated time, then per
    op its degrees (one per output dimension) and a device per task, padded to the machine's
    device count (the table's shape must be the same on every rank)."""
    return 1 + sum(len(n.sig.output_shape) + machine.num_devices for n in graph.ops)


def encode(
    strategy: Strategy, simulated_s: float, graph: OperatorGraph, machine: Machine
) -> np.ndarray:
    """`strategy` and its simulated time as one row (`row_length`); padding is -1."""
    row = np.full(row_length(graph, machine), -1.0)
    row[0], at = simulated_s, 1
    for node, config in zip(graph.ops, strategy.configs, strict=True):
        rank = len(node.sig.output_shape)
        row[at : at + rank] = config.degrees
        row[at + rank : at + rank + len(config.devices)] = config.devices
        at += rank + machine.num_devices
    return row


def decode(row: np.ndarray, graph: OperatorGraph, machine: Machine) -> tuple[Strategy, float]:
    """The strategy and simulated time `encode` wrote into `row`."""
    configs, at = [], 1
    for node in graph.ops:
        rank = len(node.sig.output_shape)
        degrees = tuple(int(d) for d in row[at : at + rank])
        devices = tuple(int(d) for d in row[at + rank : at + rank + math.prod(degrees)])
        configs.append(ParallelConfig(degrees, devices))
        at += rank + machine.num_devices
    return Strategy(tuple(n.name for n in graph.ops), tuple(configs)), float(row[0])


def choose(rows: np.ndarray) -> int:
    """The rank whose offer every rank keeps: the fastest simulated, ties to the lowest."""
    return int(np.argmin(rows[:, 0]))  # argmin returns the first of equal minima


def gather_rows(values: Sequence[float]) -> np.ndarray:
    """Every rank's `values` (the same length on each), as a (ranks, length) table that every
    rank reads the same; one rank: `values` alone."""
    from legate.core import Scope, TaskTarget, get_legate_runtime, get_machine
    from legate.core import types as ty

    from flexflow.runtime.stores import read_store
    from flexflow.runtime.tasks import offer_task

    runtime = get_legate_runtime()
    row = np.asarray(values, dtype=np.float64)
    if runtime.node_count == 1:
        return row[None, :]
    library, task_id = offer_task()
    key = next(_IDS)
    OFFERS[key] = row
    try:
        table = runtime.create_store(ty.float64, (runtime.node_count, len(row)))
        runtime.issue_fill(table, -math.inf)
        cpus = get_machine().only(TaskTarget.CPU)
        if cpus.count(TaskTarget.CPU) < runtime.node_count:
            raise StrategyError(
                "the ranks agree on their searched strategy through a task on each rank's CPU "
                "processors, and some rank has none: run with `legate --cpus 1` or more, or "
                "give every rank the same --import-strategy FILE."
            )
        with Scope(machine=cpus):
            task = runtime.create_manual_task(library, task_id, (cpus.count(TaskTarget.CPU),))
            task.add_reduction(table, ty.ReductionOpKind.MAX)
            task.add_scalar_arg(key, ty.int64)
            task.execute()
        return read_store(table)
    finally:
        OFFERS.pop(key, None)


def write_offer(key: int, table: np.ndarray) -> None:
    """The offer task's body: this process's row into its rank's row of the table."""
    from legate.core import get_legate_runtime

    table[get_legate_runtime().node_id] = OFFERS[key]


def agree_on_strategy(
    graph: OperatorGraph,
    machine: Machine,
    strategy: Strategy,
    simulated_s: float,
    imported: str | None = None,
) -> tuple[Strategy, str]:
    """The strategy every rank keeps (see the module doc) and a note saying whose it is.
    A strategy `imported` from a file must be the same on every rank (a file that differs
    between nodes is an error, not a choice)."""
    rows = gather_rows(encode(strategy, simulated_s, graph, machine))
    if len(rows) == 1:
        return strategy, ""
    if not np.isfinite(rows).all():
        raise StrategyError(
            f"the ranks' strategy offers did not all arrive ({len(rows)} ranks); rerun, or "
            "give every rank the same --import-strategy FILE."
        )
    if imported is not None:
        differ = [r for r in range(len(rows)) if not np.array_equal(rows[r, 1:], rows[0, 1:])]
        if differ:
            raise StrategyError(
                f"{imported} holds another strategy on rank(s) {differ} than on rank 0: put "
                "the same file on every node."
            )
        return strategy, ""
    winner = choose(rows)
    kept, _ = decode(rows[winner], graph, machine)
    times = ", ".join(f"{1e3 * t:.3f}" for t in rows[:, 0])
    return kept, f"agreed across {len(rows)} ranks (simulated ms: {times}): rank {winner}'s"
