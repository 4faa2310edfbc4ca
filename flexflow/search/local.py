"""Local optimality (paper §8.4): does any single-op change make a strategy faster?

Both `improving_neighbours` (check-local) and `descend` scan ops' neighbours with a scanner
(`flexflow.search.scan`): in this process, or with `workers` > 1 in that many worker processes,
several ops at once, each worker taking the next op when it is free. The descent then stays the
sequential one: a scan counts in the sweep's order, once every op before it showed no
improvement; scans of the ops after one that improved saw the strategy before the change, so
they are stopped and dropped and those ops scanned again. When nothing improves (the sweep
that proves local optimality, most of a large model's descent) every scan counts. Both return
the same answer for any number of workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from flexflow.search.collector import fewer_collections
from flexflow.search.mcmc import op_neighbours
from flexflow.search.scan import OpScan, make_scanner
from flexflow.search.spaces import Space, SpaceSets
from flexflow.simulator import SimContext
from flexflow.strategy import ParallelConfig, Strategy


@dataclass(frozen=True, slots=True)
class Neighbour:
    op: str
    config: ParallelConfig
    iteration_s: float


@fewer_collections()
def improving_neighbours(
    context: SimContext,
    strategy: Strategy,
    space: Space,
    on_op: Callable[[int], None] | None = None,
    workers: int = 1,
) -> tuple[float, list[Neighbour]]:
    """The strategy's cost and every single-op change that lowers it, fastest first (equal
    times in op order); `on_op(done)` after each op with the number of ops scanned."""
    better = []
    ops = iter(range(len(strategy)))
    done = 0
    with make_scanner(context, strategy, space, workers) as scanner:
        base = scanner.cost_s
        while True:
            while scanner.idle and (op := next(ops, None)) is not None:
                scanner.start(op)
            if not scanner.busy:
                break
            scan = scanner.result()
            better += [
                (cost, scan.op, k, Neighbour(strategy.ops[scan.op], config, cost))
                for k, (config, cost) in enumerate(scan.faster)
            ]
            done += 1
            if on_op is not None:
                on_op(done)
    # fastest first; equal times in the ops' and then the space's order, however scans ended
    return base, [n for *_, n in sorted(better, key=lambda entry: entry[:3])]


@dataclass(frozen=True, slots=True)
class Descent:
    """What `descend` returns."""

    strategy: Strategy
    finished: bool
    """The strategy is locally optimal (the descent did not run out of time)."""
    improved_at_s: float | None
    """Seconds into the descent when it last improved the strategy; None if it never did."""
    history: tuple[tuple[float, float], ...] = ()
    """(seconds into the descent, simulated iteration time): at its start and after every
    improvement (what a search's picture draws)."""


@dataclass(frozen=True, slots=True)
class DescentStatus:
    """What a progress display shows while `descend` runs."""

    cost_s: float
    """The current strategy's simulated iteration time."""
    unchanged: int
    """Ops examined in a row without an improvement in this width of sweep: a wide sweep is
    done, and the descent with it, at `num_ops`."""
    num_ops: int
    neighbours: int
    """Single-op changes simulated so far."""
    improvements: int
    elapsed_s: float
    wide: bool = True
    """Whether ops are trying every configuration now (else only their neighbours')."""


@fewer_collections()
def descend(
    context: SimContext,
    strategy: Strategy,
    space: Space,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    simulation: str = "delta",
    on_status: Callable[[DescentStatus], None] | None = None,
    workers: int = 1,
    narrow: bool = True,
) -> Descent:
    """Coordinate descent: give each op in turn its best configuration with the others fixed,
    cycling over the ops until a full sweep changes nothing, so the result is locally optimal.

    With `narrow`, sweeps come in two widths. A narrow sweep gives each op only the
    configurations its graph neighbours have now (those that drop the transfers to or from
    them), a few simulations per op; a wide sweep tries every configuration of the op's space.
    The descent sweeps narrow first, and again after each change a wide sweep makes, until a
    whole narrow sweep changes nothing; it ends once a whole wide sweep changes nothing (the
    proof of local optimality, as without `narrow`). Why: from a chain's strategy a wide-only
    descent climbs through dozens of tiny changes, most of them an op (often one unrolled
    step) taking a neighbour's configuration, each found a wide sweep after the change that
    made it pay; narrow sweeps find them at a few percent of the cost (NMT on p100:4:
    benchmarks/README.md, "Search time").

    With `budget_s` it stops after that many seconds, and `finished` says whether it got
    there (the strategy is then locally optimal) or ran out of time (it is only no worse).
    `simulation` says how each neighbour is simulated (`make_evaluator`); `on_status` gets a
    `DescentStatus` after every op and now and then during one; `workers` > 1 scans that
    many ops at once (the module doc; then `clock` must be `time.perf_counter`, which the
    workers read)."""
    if workers > 1 and clock is not time.perf_counter:
        raise ValueError("a descent with workers reads time.perf_counter; pass no other clock")
    begin = clock()
    num_ops = len(strategy)
    if num_ops == 0:
        return Descent(strategy, True, None)
    adjacent = op_neighbours(context.graph)
    allowed = SpaceSets(space)
    unchanged = improvements = 0  # unchanged: ops scanned in this width since the last change
    improved_at = None
    wide = not narrow
    with make_scanner(context, strategy, space, workers, simulation, clock) as scanner:
        scanner.deadline = None if budget_s is None else begin + budget_s

        current_s = scanner.cost_s  # (a serial scanner's own cost is the neighbour's mid-scan)
        history = [(0.0, current_s)]

        def report() -> None:
            if on_status is not None:
                on_status(
                    DescentStatus(
                        current_s,
                        unchanged,
                        num_ops,
                        scanner.simulations,
                        improvements,
                        clock() - begin,
                        wide,
                    )
                )

        def neighbours_configs(op: int) -> tuple[ParallelConfig, ...]:
            """The configurations `op`'s neighbours have now that it may take, but not its own."""
            configs, own, valid = scanner.strategy.configs, scanner.strategy[op], allowed[op]
            found = (configs[n] for n in adjacent[op])
            return tuple(dict.fromkeys(c for c in found if c != own and c in valid))

        scanner.on_progress = report  # a 64-GPU op's scan takes a minute
        expected = 0  # the next op in the sweep's order
        ahead = 0  # ops from `expected` on that were started (a scan under way or ended)
        ended: dict[int, OpScan] = {}  # scans that ended before an earlier op's
        while True:
            while scanner.idle and ahead < num_ops - unchanged:
                op = (expected + ahead) % num_ops
                scanner.start(op, None if wide else neighbours_configs(op))
                ahead += 1
            scan = scanner.result()
            ended[scan.op] = scan
            while expected in ended:  # the sweep's order: a scan counts once all before it did
                scan = ended.pop(expected)
                expected, ahead = (expected + 1) % num_ops, ahead - 1
                if scan.best != scanner.strategy[scan.op]:
                    scanner.cancel()  # the later ops' scans saw the strategy before the change
                    ended.clear()
                    ahead = 0
                    current_s = scanner.apply(scan.op, scan.best)
                    unchanged, improved_at = 0, clock() - begin
                    history.append((improved_at, current_s))
                    improvements += 1
                    wide = not narrow  # narrow sweeps again after any change
                else:
                    unchanged += 1
                report()
                if not scan.finished:
                    scanner.cancel()
                    return Descent(scanner.strategy, False, improved_at, tuple(history))
                if unchanged == num_ops:
                    break
            if unchanged == num_ops:  # a whole sweep changed nothing (no scan is under way)
                if wide:
                    return Descent(scanner.strategy, True, improved_at, tuple(history))
                wide, unchanged = True, 0
