"""How a forward or backward task's pass-specific scalars change the op it computes.

Kept apart from the Legate task bodies (flexflow.runtime.tasks, flexflow.gpu.variant) so both
variants, and tests without Legate, share one definition.
"""

from __future__ import annotations

from dataclasses import replace

from flexflow.graph import OperatorGraph
from flexflow.ops import Op

_MASK64 = 2**64 - 1


def run_seed_key(seed: int) -> int:
    """What run `seed` mixes into every dropout seed (`seeded_for_run`): splitmix64 of it,
    63 bits, so runs' keys differ in about half their bits, not by a fixed stride."""
    z = (seed + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) >> 1


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
    graph as it is. The layers' seeds are XORed with one key (`run_seed_key`), so layers of
    distinct seeds keep distinct seeds."""
    if not seed or not any(node.kind == "dropout" for node in graph.ops):
        return graph
    key = run_seed_key(seed)
    ops = tuple(
        replace(node, op=replace(node.op, seed=(node.op.seed % 2**63) ^ key))
        if node.kind == "dropout"
        else node
        for node in graph.ops
    )
    return replace(graph, ops=ops)
