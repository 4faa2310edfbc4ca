"""How a forward or backward task's pass-specific scalars change the op it computes.

Kept apart from the Legate task bodies (flexflow.runtime.tasks, flexflow.gpu.variant) so both
variants, and tests without Legate, share one definition.
"""

from __future__ import annotations

from dataclasses import replace

from flexflow.graph import OperatorGraph
from flexflow.ops import Op

RUN_SEED_STRIDE = 1_000_000_007
"""How far apart the mask streams of one dropout layer lie for consecutive run seeds
(`seeded_for_run`): further than the iterations of any run, so no two runs share a mask."""


def op_for_task(op: Op, extra: tuple[int, ...]) -> Op | None:
    """Dropout tasks get (training, iteration): in training the op draws this iteration's mask
    (its seed mixed with the iteration, so every iteration drops other elements, identically
    on every tiling); outside training (forward passes only: backward passes always train) it
    is the identity (None). Other ops are unchanged."""
    if op.kind != "dropout" or not extra:
        return op
    training, iteration = extra
    if not training:
        return None
    return replace(op, seed=(op.seed * 1_000_003 + iteration) % 2**63)


def seeded_for_run(graph: OperatorGraph, seed: int) -> OperatorGraph:
    """`graph` with every dropout's seed mixed with the run's `seed` (FFConfig.seed, which also
    draws the initial weights), so runs of other seeds drop other elements; seed 0 leaves the
    graph as it is. Layers of one model keep distinct streams: their own seeds differ by less
    than RUN_SEED_STRIDE, or by much more (`FFModel.dropout`'s default)."""
    if not seed or not any(node.kind == "dropout" for node in graph.ops):
        return graph
    ops = tuple(
        replace(node, op=replace(node.op, seed=(node.op.seed + seed * RUN_SEED_STRIDE) % 2**63))
        if node.kind == "dropout"
        else node
        for node in graph.ops
    )
    return replace(graph, ops=ops)
