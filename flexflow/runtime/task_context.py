"""What a Python task body gets from Legate's task context: its executor, looked up by id in
this process's registry, its pass and scalars (`task_arguments`), and its store arguments as
numpy arrays (`array_of`; a fused forward's, with staged model inputs and flat weights:
`forward_inputs`)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from flexflow.fusion import SlotKind
from flexflow.runtime.flat import FlatLayout
from flexflow.runtime.passes import Pass

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor

EXECUTORS: dict[int, Executor] = {}
"""Executors of this process by id, for the task body (Legate hands it only stores and scalars).
An executor stays here until `Executor.close()`, since its tasks may still be pending."""
EXECUTOR_IDS = itertools.count()


def array_of(physical) -> np.ndarray:
    """A task argument as a numpy array over its memory: through DLPack (0.6 us, against
    2.4 us for the store's array interface and 2.5 us for an inline allocation's; every task
    converts each argument, and Python in a task holds the lock other tasks wait for)."""
    store = physical.data()
    try:
        return np.from_dlpack(store)
    except (BufferError, TypeError, RuntimeError):  # a store DLPack cannot describe
        return np.asarray(store)


def task_arguments(context) -> tuple[Executor, Pass, int, int, tuple[int, ...]]:
    """The scalars every launch passes: executor id, pass, op (or parameter), task index, and
    the pass's own values (the update's step number; the loss's id, total and valid samples).
    Values that change between iterations travel as scalars, never as executor attributes,
    since a task may run after the program has issued the next iteration."""
    executor_id, which, op, index, *extra = (s.value() for s in context.scalars)
    return EXECUTORS[executor_id], Pass(which), op, index, tuple(extra)


def forward_inputs(
    executor: Executor, layout, arguments: list, keys: dict[int, int], flat: FlatLayout | None
) -> list:
    """The arrays of a fused forward's input slots, then the arguments after them: from the
    task's arguments, except model inputs staged under `keys` (tensor id -> staged key, -1
    when fed to a store) and, with `flat` parameters, the weights, split from the flat copy
    that comes first (`TaskArguments.add_forward_inputs`)."""
    arguments = iter(arguments)
    weights = {}
    if flat is not None:
        pids = [slot.id for slot in layout.inputs if slot.kind is SlotKind.WEIGHT]
        weights = dict(zip(pids, flat.split(next(arguments).reshape(-1), pids), strict=True))
    arrays = []
    for slot in layout.inputs:
        if slot.kind is SlotKind.WEIGHT and flat is not None:
            arrays.append(weights[slot.id])
        elif slot.kind is SlotKind.TENSOR and keys.get(slot.id, -1) >= 0:
            arrays.append(executor.staged_tile(keys[slot.id], slot.region))
        else:
            arrays.append(next(arguments))
    return arrays + list(arguments)
