"""What an op-tile task runs, as its `Pass` scalar (paper §7's runtime): an op's or a fused
group's forward or backward, the loss, an update, a model input's feed, batch statistics.

It imports no Legate: the issuing side, the task bodies (`flexflow.runtime.tasks`,
`flexflow.gpu.variant`) and the measured trace (`flexflow.runtime.trace`) share it.
"""

from __future__ import annotations

import enum


class Pass(enum.IntEnum):
    FORWARD = 0
    BACKWARD = 1
    UPDATE = 2
    LOSS = 3
    STATISTICS_FORWARD = 4
    STATISTICS_BACKWARD = 5
    FEED = 6
    RUNNING_STATISTICS = 7
    FUSED_FORWARD = 8
    """A fused group's forward (flexflow.fusion); the op scalar is the group's id."""
    FUSED_BACKWARD = 9
    FUSED_FORWARD_LOSS = 10
    """The last group's forward, then the loss on its output tile (the LOSS pass's scalars)."""
    FUSED_STEP = 11
    """FUSED_FORWARD_LOSS, then the group's backward in the same task (training)."""
    FLAT_UPDATE = 12
    """The pending update alone, on one device's copy of the flat buffers (the first part of
    a step that applies it; `Executor.apply_pending`)."""


FUSED_PASSES = {
    Pass.FUSED_FORWARD: "forward",
    Pass.FUSED_FORWARD_LOSS: "forward+loss",
    Pass.FUSED_STEP: "step",
    Pass.FUSED_BACKWARD: "backward",
}
"""The passes of fused tasks and what each runs (flexflow.fused_run.FUSED_PARTS)."""
FUSED_SCALARS = {
    Pass.FUSED_FORWARD: 2,
    Pass.FUSED_BACKWARD: 2,
    Pass.FUSED_FORWARD_LOSS: 6,
    Pass.FUSED_STEP: 7,
}
"""A fused pass's own scalars, (training, iteration[, the loss's four][, a step's pending
update]); any after them are the staged keys of the model inputs the task reads from the batch
(flexflow.runtime.feeding.Feeds.staged_inputs)."""
