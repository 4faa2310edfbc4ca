"""Garbage collection run by the program, never inside a Legate task.

Legate forbids destroying a store inside a task: Legion aborts the process ("Illegal discard
operation call performed in leaf task"). An automatic collection starts at whatever allocation
crosses its threshold, in the task bodies' Python too (or in Legate's own code around them),
and frees whatever cyclic garbage holds stores; cuPyNumeric leaves such cycles behind (its
arrays' eager and deferred halves refer to each other: a `predict` on cuPyNumeric data left
4 per batch, and training under a strategy run by Python task bodies then aborted the process
in 6 of 6 runs). Turning collection off around a body is not enough: the allocation that
starts it may come after the body returns, still inside the task. So while any executor is
open, automatic collection is off (`CollectionHold`), and the program collects what would
have been due whenever it creates a task (`collect_due`); closing the last executor turns
automatic collection back on if it was on before.
"""

from __future__ import annotations

import gc
import threading


class CollectionHold:
    """Automatic collection off while anyone holds it (the open executors of this process:
    collection is one switch per process), restored when the last lets go."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_enabled = False

    def hold(self) -> None:
        with self._lock:
            if self._holders == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            if self._holders == 0:
                return
            self._holders -= 1
            if self._holders == 0 and self._was_enabled:
                gc.enable()

    @property
    def wanted(self) -> bool:
        """Whether collections should run: automatic collection was on (the user's choice
        of off is kept)."""
        return gc.isenabled() or (self._holders > 0 and self._was_enabled)


COLLECTION = CollectionHold()

FULL_COLLECTION_WAIT = 10
"""Young collections between full ones: ten times the automatic collector's third threshold."""


def collect_due() -> None:
    """From the program (never from a task): the collection automatic collection would have
    run by now (a young generation over its threshold); nothing otherwise."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    if not (COLLECTION.wanted and thresholds[0] and counts[0] > thresholds[0]):
        return
    # the oldest generation over its threshold, as the automatic collector picks; a full
    # collection waits ten times longer, since CPython's own also waits for the long-lived
    # objects to grow by a quarter (which Python does not expose): rare on large heaps
    if counts[2] > FULL_COLLECTION_WAIT * thresholds[2]:
        gc.collect(2)
    else:
        gc.collect(1 if counts[1] > thresholds[1] else 0)
