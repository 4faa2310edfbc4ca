"""One batch's results, read from Legate when first asked for, and how many unread batches an
executor lets Legate hold (paper §7's runtime: issuing runs ahead of the tasks)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from flexflow.errors import ShapeError
from flexflow.runtime.stores import read_store

TASKS_IN_FLIGHT = 32
"""How many tasks of batches whose results nobody has read an executor lets Legate hold before
it waits for the older ones (at least two batches' worth). Legion keeps a window of operations
(1,024 by default); when it is full, a store freed in Python blocks with the interpreter lock
held while the Python tasks that would drain the window wait for that lock: 3,000 unread
iterations of the runtime benchmark's MLP hung 4 runs of 4 (tests/runtime/test_unread_batches.py;
flexflow.bootstrap also widens Legion's window). Fewer is also faster: Legion's work per task
grows with the operations outstanding, and on the runtime benchmark's MLP (two tasks per
iteration) 16 iterations ahead took 1.83-1.85 ms per iteration against 2.09-2.24 ms for 32 to 128
ahead, and 1.90-1.97 ms for 2 to 8 (Legate's threads used 3.1-3.2 ms of CPU per iteration
against 3.8-3.9)."""

STEP_FAILURES = {
    -1: "a label outside [0, classes) (labels passed as Legate stores are not checked before "
    "the step runs): pass integer class indices from 0 to the number of classes - 1",
    -2: "a store not laid out row-major, which the C++ step task cannot read: a bug, report it",
    -4: "a token id outside [0, num_embeddings) of its embedding: remap the ids or enlarge "
    "num_embeddings",
}
"""The codes a C++ step task writes as its correct count when it could not run
(native/legate_tasks.cc)."""


@dataclass(frozen=True, slots=True)
class BatchStats:
    """The loss and correct predictions of one batch, read from Legate when first asked for.

    Reading waits for the batch's tasks; holding it unread lets the next batch's tasks be
    issued while this one runs."""

    _store: object
    samples: int
    predictions: int
    """What accuracy divides the correct count by: the samples times the predictions each
    makes (`flexflow.runtime.loss.predictions_per_sample`)."""
    step: int | None = None
    """Of a launch of several steps: this batch's step, whose rows `_store` (a `LaunchRows`)
    holds with the other steps'; None: `_store` is the batch's own (tasks, 2) store."""
    _value: list = field(default_factory=list, repr=False, compare=False)
    """The (loss, correct) read, once read."""
    held: list = field(default_factory=list, repr=False, compare=False)
    """Arrays whose addresses the batch's C++ tasks read (flexflow.runtime.native_tasks),
    kept until the batch is known to have run: read, or older than a batch that was."""

    def read(self) -> tuple[float, int]:
        if not self._value:
            store = self._store
            rows = read_store(store) if self.step is None else store.rows(self.step)
            _check_step_codes(rows[:, 1])
            loss, correct = rows.sum(axis=0)  # over the loss's tasks
            self._value.append((float(loss), int(round(correct))))
            self.held.clear()
        return self._value[0]

    @property
    def loss(self) -> float:
        return self.read()[0]


class LaunchRows:
    """The (loss, correct) rows of every step of one launch of several steps
    (`flexflow.runtime.step_launches`): a (tasks, steps, 2) store, read once for all of them."""

    def __init__(self, store: object) -> None:
        self.store = store
        self._rows: np.ndarray | None = None

    def rows(self, step: int) -> np.ndarray:
        """Step `step`'s (tasks, 2) rows (the first call waits for the launch)."""
        if self._rows is None:
            self._rows = read_store(self.store)
        return self._rows[:, step]


def _check_step_codes(correct: np.ndarray) -> None:
    for code, reason in STEP_FAILURES.items():
        if np.any(correct == code):
            raise ShapeError(f"training step: a step task did not run: {reason}.")


class UnreadBatches:
    """The batches an executor issued since the last one known finished, each with the number
    of tasks issued before it; `add` waits for older ones once they hold too many tasks."""

    def __init__(self) -> None:
        self._batches: deque[tuple[BatchStats, int]] = deque()

    def __len__(self) -> int:
        return len(self._batches)

    @property
    def oldest_began(self) -> int:
        """Tasks issued before the oldest unread batch's."""
        return self._batches[0][1]

    def add(self, stats: BatchStats, began: int, issued: int) -> None:
        """Record `stats`, of the batch whose tasks began after `began` of the `issued` so far.
        Unless the unread batches then hold more than TASKS_IN_FLIGHT tasks (or two batches'
        tasks, if more), return at once; else first wait for the batch that leaves about half
        that many unread (a batch's results come after every earlier batch's tasks: each step
        reads the weights the one before it updated)."""
        batches = self._batches
        batches.append((stats, began))
        bound = max(TASKS_IN_FLIGHT, 2 * (issued - began))
        if issued - batches[0][1] <= bound:
            return
        waited = batches.popleft()
        while batches and issued - batches[0][1] > bound // 2:
            waited = batches.popleft()
        waited[0].read()
