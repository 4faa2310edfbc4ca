"""How a forward or backward task's pass-specific scalars change the op it computes.

Kept apart from the Legate task bodies (flexflow.runtime.tasks, flexflow.gpu.variant) so both
variants, and tests without Legate, share one definition.
"""

from __future__ import annotations

from dataclasses import replace

from flexflow.ops import Op


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
