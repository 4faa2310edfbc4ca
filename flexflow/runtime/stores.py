"""Small helpers on Legate stores: making one from an array, views of a region, reading one."""

from __future__ import annotations

from typing import Any

import numpy as np
from legate.core import LogicalStore
from legate.core import types as ty

from flexflow.ops.base import Region
from flexflow.runtime.passes import Pass

LEGATE_TYPES = {
    "float32": ty.float32,
    "float64": ty.float64,
    "int32": ty.int32,
    "int64": ty.int64,
}


def source_store(runtime: Any, value: Any) -> Any:
    """A Legate store holding `value`: a cuPyNumeric array's own store (no copy through the
    host), or a store over a numpy array's buffer."""
    interface = getattr(value, "__legate_data_interface__", None)
    if interface is not None:
        return next(iter(interface["data"].values())).data
    array = np.ascontiguousarray(value)
    if str(array.dtype) not in LEGATE_TYPES:
        array = array.astype(np.float32)
    dtype = LEGATE_TYPES[str(array.dtype)]
    return runtime.create_store_from_buffer(dtype, array.shape, array, True)


def copied_store(runtime: Any, library: Any, task_id: int, executor_id: int, value: Any) -> Any:
    """A new store holding `value` (an array, or a store or a view of one), filled by executor
    `executor_id`'s copy task (Pass.FEED): with several ranks, Legate 25.11's issue_copy into a
    store it splits across ranks aborts ("Could not find ProcessorKind 0 in default store
    targets"), and so does one inside a Scope or from a delinearized view."""
    source = value if isinstance(value, LogicalStore) else source_store(runtime, value)
    store = runtime.create_store(source.type, source.shape)
    task = runtime.create_auto_task(library, task_id)
    for scalar in (executor_id, int(Pass.FEED), -1, 0):
        task.add_scalar_arg(scalar, ty.int64)
    task.add_input(source)
    task.add_output(store)
    task.add_alignment(source, store)
    task.execute()
    return store


def slice_store(store: Any, region: Region) -> Any:
    """The view of `store` covering `region` ((start, stop) per dimension)."""
    for dim, (start, stop) in enumerate(region):
        store = store.slice(dim, slice(start, stop))
    return store


def read_store(store: Any) -> np.ndarray:
    """A copy of the store's values (waits for the tasks writing it). It maps the store in this
    process until the store is collected, and Legate then remaps it around every task that uses
    it (the MLP's iteration took twice as long after its weights had been read): read only a
    store no task uses afterwards, such as a `copied_store` of the one wanted."""
    return np.array(store.get_physical_store().get_inline_allocation())
