"""Model inputs into an iteration (paper §7's runtime): each batch staged in this process for the
tasks that read it there, or copied into one of two stores per input, a shard per device that
reads it (`flexflow.tiling.input_shards`)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from legate.core import Scope

from flexflow.errors import ShapeError
from flexflow.graph import OperatorGraph
from flexflow.ops.base import Region, TensorSpec
from flexflow.runtime.passes import Pass
from flexflow.runtime.stores import slice_store, source_store
from flexflow.strategy import Strategy
from flexflow.tiling import input_shards

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


class Feeds:
    """One executor's model inputs: staged batches and the spare store of each input.

    One process holds every rank's data in a single-rank run (`staging`), so the feed and loss
    tasks read numpy batches straight from here (`staged_tile`) instead of attaching each
    batch as a store, and the step tasks that read a model input whole read it from here too
    (`staged_inputs`: no feed task, no store); with several ranks, batches travel as stores.
    Holds no reference to its executor (see `Executor.store_of`)."""

    def __init__(
        self,
        graph: OperatorGraph,
        strategy: Strategy,
        regions: list[tuple[Region, ...]],
        staging: bool,
        staged_inputs: dict[int, int],
        new_store: Callable[[TensorSpec], Any],
    ) -> None:
        self.graph = graph
        self.staging = staging
        self.staged_inputs = staged_inputs
        """Model inputs (tensor id -> readers) the step tasks read from the staged batch."""
        self.shards = input_shards(graph, strategy, regions)
        self.keys: dict[int, int] = {}
        """This batch's staged key per model input in `staged_inputs`."""
        self._staged: dict[int, list] = {}
        self._ids = itertools.count()
        self._spare = {t.id: new_store(t.spec) for t in graph.input_tensors}
        """A second store per model input, fed in turn with the first: the next batch's feed
        tasks then need not wait for this iteration's backward tasks, which read the input."""

    def key(self, tensor_id: int) -> int:
        """The staged key of a model input the step tasks read from here; -1: from its store."""
        return self.keys.get(tensor_id, -1)

    def staged_keys(self) -> tuple[int, ...]:
        """Scalars of the last group's forward tasks: the key of each input in
        `staged_inputs` (-1: read from its store)."""
        return tuple(self.keys.get(tid, -1) for tid in self.staged_inputs)

    def stage(self, array: np.ndarray, readers: int) -> int:
        """Keep `array` for `readers` tasks that will read it (`staged_tile`); its key."""
        key = next(self._ids)
        self._staged[key] = [array, readers]
        return key

    def staged_tile(self, key: int, region: Region) -> np.ndarray:
        """The `region` tile (its leading dimensions, for labels) of a staged array, for one of
        the tasks reading it (the last one releases the array)."""
        entry = self._staged[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._staged[key]
        array = entry[0]
        return array[tuple(slice(start, stop) for start, stop in region[: array.ndim])]

    def feed(self, executor: Executor, tensor_id: int, value) -> None:
        """Copy a model input in, one shard per device that reads it, or stage it for the
        step tasks that read it here."""
        spec = self.graph.tensors[tensor_id].spec
        name = self.graph.tensors[tensor_id].name
        if not hasattr(value, "dtype"):
            value = np.asarray(value)
        shape = tuple(np.shape(value))
        if shape[1:] != spec.shape[1:]:
            raise ShapeError(
                f"input '{name}' takes samples of shape {spec.shape[1:]} (the model's input "
                f"is {spec.shape}), got an array of shape {shape}; pass data whose samples "
                f"have shape {spec.shape[1:]}."
            )
        if shape != spec.shape:
            raise ShapeError(
                f"input '{name}' has shape {spec.shape}, got an array of shape {shape}; "
                f"batches must have the model's batch size {spec.shape[0]} (pad the last "
                f"batch, as `flexflow.data.DataLoader` does)."
            )
        if str(value.dtype) != spec.dtype.value:  # e.g. float64 images, int64 token ids
            value = value.astype(spec.dtype.value)
        shards = self.shards[tensor_id]
        staged = self.staging and not hasattr(value, "__legate_data_interface__")
        self.keys.pop(tensor_id, None)
        if staged and tensor_id in self.staged_inputs:  # the tasks read it from here
            array = np.ascontiguousarray(value)
            self.keys[tensor_id] = self.stage(array, self.staged_inputs[tensor_id])
            return
        if staged:
            key = self.stage(np.ascontiguousarray(value), len(shards))
        else:
            source = source_store(executor.runtime, value)
        target = self._spare[tensor_id]
        self._spare[tensor_id] = executor.tensors[tensor_id]
        executor.tensors[tensor_id] = target
        # a copy task per shard: Legate 25.11's issue_copy of store slices fails inside a Scope
        # of any processor but the first
        for index, (region, device) in enumerate(shards):
            with Scope(machine=executor.processors[device]):
                if staged:
                    task = executor.new_task(device, Pass.FEED, tensor_id, index, key)
                else:
                    task = executor.new_task(device, Pass.FEED, tensor_id, index)
                    task.add_input(slice_store(source, region))
                task.add_output(slice_store(target, region))
                task.execute()
