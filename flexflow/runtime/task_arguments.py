"""The store arguments of an executor's tasks: which view of which store each slot of a fused
task's layout names on a device, and the cache of those views.

A fused task names its inputs, outputs, reductions and partial gradients by slot
(`flexflow.fusion.Slot`); this turns each into a view of the store holding it on the task's
device: a tensor's tile, a weight's copy on the device (`ParameterStores.view`), the device's
row of batch norm's running statistics or of a partial gradient, a gradient kept in parts as
one view per part (`flexflow.runtime.gradients`). Fused tasks name the same views every
iteration and each costs the issuing thread about 10 us, so they are kept (`tile`, `tiling`)
until the stores under them are replaced (`forget`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from legate.core import types as ty

from flexflow.fusion import Slot, SlotKind, TaskLayout
from flexflow.gradient_parts import TaskKey
from flexflow.launches import consecutive_cpus
from flexflow.ops.base import Region
from flexflow.runtime.batch_statistics import BatchStatistics
from flexflow.runtime.feeding import Feeds
from flexflow.runtime.gradients import GradientStores
from flexflow.runtime.stores import slice_store
from flexflow.runtime.weights import ParameterStores
from flexflow.strategy import Strategy


class TaskArguments:
    """The views an executor's tasks name, over the executor's stores (held, not copied:
    `running` is replaced entry by entry when statistics are set)."""

    def __init__(
        self,
        runtime: Any,
        strategy: Strategy,
        kinds: Sequence[str],
        tensors: dict[int, Any],
        gradients: GradientStores,
        params: ParameterStores,
        batch_statistics: BatchStatistics,
        feeds: Feeds,
        contributors: dict[int, tuple[int, ...]],
    ) -> None:
        self.runtime, self.strategy, self.kinds = runtime, strategy, tuple(kinds)
        self.tensors, self.gradients, self.params = tensors, gradients, params
        self.batch_statistics, self.feeds, self.contributors = batch_statistics, feeds, contributors
        self.running = batch_statistics.running
        self._views: dict[tuple[int, Any], tuple] = {}  # (id(store), key) -> (store, view)
        self._launch_token = None  # see `launch_token`

    @property
    def cached(self) -> int:
        """How many views are kept (a test checks they stop growing)."""
        return len(self._views)

    def forget(self) -> None:
        """Drop every kept view: after stores are replaced (weights, states, statistics)."""
        self._views.clear()

    def _kept(self, store, key, make, keep: bool):
        """The view `make()` of `store` under `key`, kept unless not `keep` (a store of one
        batch). A store replaced since is told apart by identity, not by its id."""
        found = self._views.get((id(store), key))
        if found is None or found[0] is not store:
            found = (store, make())
            if keep:
                self._views[(id(store), key)] = found
        return found[1]

    def tile(self, store, region: Region, keep: bool = True):
        """`store`'s view of `region`, kept unless not `keep`."""
        return self._kept(store, region, lambda: slice_store(store, region), keep)

    def tiling(self, store, shape: tuple[int, ...], keep: bool = True):
        """`store` partitioned into tiles of `shape`, kept unless not `keep` (a store of one
        batch; `flexflow.runtime.concurrent`)."""
        return self._kept(store, ("tiling", shape), lambda: store.partition_by_tiling(shape), keep)

    def slot_argument(self, slot: Slot, device: int) -> tuple[Any, Region]:
        """The store a fused task on `device` names by `slot`, and its region of it."""
        if slot.kind is SlotKind.WEIGHT:
            store = self.params.view(self.params.weights[slot.id], slot.id, device)
        elif slot.kind is SlotKind.RUNNING:
            store = self.running[slot.id]
            if slot.id in self.batch_statistics.rows:  # the row of the device's point
                k = self.strategy[slot.id].devices.index(device)
                return store, ((k, k + 1), *slot.region)
        else:
            store = (self.tensors if slot.kind is SlotKind.TENSOR else self.gradients.stores)[
                slot.id
            ]
        return store, slot.region

    def slot_store(self, slot: Slot, device: int):
        """The store view a fused task on `device` names by `slot`."""
        return self.tile(*self.slot_argument(slot, device))

    def partial_grad_argument(self, pid: int, region: Region, device: int) -> tuple[Any, Region]:
        """The store of `pid`'s partial gradients and `device`'s row of `region` in it."""
        k = self.contributors[pid].index(device)
        return self.params.partials[pid], ((k, k + 1), *region)

    def backward_inputs(self, group: int, index: int, device: int) -> list[tuple[Any, Region]]:
        """The store arguments of a fused backward's input slots on `device`, a gradient kept
        in parts as one per part (`GradientStores.backward_arguments`)."""
        return self.gradients.backward_arguments(
            group, index, lambda slot: self.slot_argument(slot, device)
        )

    def add_forward_inputs(self, task, layout: TaskLayout, device: int) -> None:
        """A fused forward's input slots, less the model inputs it reads from staging; with
        flat parameters (`flexflow.runtime.flat`), the device's copy of every weight first
        instead of its weight slots."""
        flat = self.params.flat is not None
        if flat:
            task.add_input(self.params.flat_view(self.params.flat_weights, device))
        for slot in layout.inputs:
            if flat and slot.kind is SlotKind.WEIGHT:
                continue
            if slot.kind is not SlotKind.TENSOR or self.feeds.key(slot.id) < 0:
                task.add_input(self.slot_store(slot, device))

    def add_pending_update(self, task, device: int) -> None:
        """The last arguments of a step that first applies the pending update to `device`'s
        replicas of the flat buffers (`Executor.updates_in_step`): every device's row of the
        pending partial gradients and the replica's states read; the replica and its states
        written (with the step's reading of the weights, read-write: updated in place before
        the forward pass reads them). Each device's row is its own argument: a task reading the
        whole store its rows were written through made Legion's analysis of every step cost
        about 2 ms of runtime work (12x; benchmarks/results/runtime.md)."""
        params = self.params
        if params.flat is None:  # a model without weights
            return
        read, written = params.pending_update_arguments(device, params.flat_view)
        for view in read:
            task.add_input(view)
        for view in written:
            task.add_output(view)

    def add_partial_grads(self, task, layout: TaskLayout, device: int) -> None:
        """This device's partial weight gradients: the accumulators read (after the other
        inputs), then the accumulators and the overwritten ones written (after the outputs);
        with flat parameters, where every task writes its device's whole partial gradients,
        their flat row."""
        if self.params.flat is not None:
            task.add_output(self.params.flat_view(self.params.flat_partials, device))
            return
        row = self.partial_grad_argument
        read = [self.tile(*row(s.id, s.region, device)) for s in layout.accumulators]
        written = [self.tile(*row(s.id, s.region, device)) for s in layout.overwrites]
        for tile in read:
            task.add_input(tile)
        for tile in read + written:
            task.add_output(tile)

    def add_reductions(self, task, layout: TaskLayout, key: TaskKey) -> None:
        """The gradients fused task `key` adds into (`TaskLayout.reductions`), each into its
        part (`GradientStores.reduction_argument`)."""
        for slot in layout.reductions:
            store = self.tile(*self.gradients.reduction_argument(slot, key))
            task.add_reduction(store, ty.ReductionOpKind.ADD)

    def launch_token(self):
        """A store of one element per CPU processor that every concurrent launch reads and
        writes on its processors' elements (`flexflow.runtime.concurrent`), made once."""
        if self._launch_token is None:
            self._launch_token = self.runtime.create_store(ty.float32, (self.kinds.count("cpu"),))
            self.runtime.issue_fill(self._launch_token, 0.0)
        return self._launch_token

    def cpu_range(self, devices: Sequence[int]) -> range:
        """The CPU processors of consecutive CPU `devices` (`flexflow.launches.consecutive_cpus`)."""
        found = consecutive_cpus(devices, self.kinds)
        if isinstance(found, str):
            raise AssertionError(found)
        return found
