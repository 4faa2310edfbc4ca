"""A model's parameters in Legate stores: weights, optimizer states and partial gradients.

Each parameter has a weight store, one store per optimizer state (momentum, Adam's moments)
shaped like it, and a store of partial gradients with a leading device axis: each device whose
backward tasks compute part of the gradient (its *contributors*) adds into its own row, and the
update sums the rows in device order (a Legate reduction from tasks on several processors into
one store made Legate run them one after the other).

Replicated (data parallelism with updates inside the step, `Executor.updates_in_step`): every
device keeps a copy of every weight and state, and all parameters live in one flat buffer per
kind (`flexflow.runtime.flat`), with a leading axis of one copy per device: the weights, each
state, and two sets of partial gradients that swap each iteration, so a step writes one set
while the next step's update reads the other. A step task names a device's copy of a whole
buffer (`flat_view`); everything else names a parameter's view of it, shaped like the
parameter with the copy axis in front, and a device's copy of that through `view`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from legate.core import types as ty

from flexflow.graph import OperatorGraph
from flexflow.ops.init import initialize
from flexflow.runtime.flat import FlatLayout
from flexflow.runtime.stores import read_store


class ParameterStores:
    """The stores of every parameter of `graph` (see the module doc); `store_of(array)` makes
    a store holding an array (the executor's copy task)."""

    def __init__(
        self,
        runtime: Any,
        graph: OperatorGraph,
        contributors: Mapping[int, tuple[int, ...]],
        state_names: Sequence[str],
        replicated: bool,
        store_of: Callable[[np.ndarray], Any],
        seed: int,
    ) -> None:
        self.runtime, self.graph = runtime, graph
        self.contributors = contributors
        """Per parameter, the devices whose backward tasks compute parts of its gradient."""
        self.replicated = replicated
        self._store_of = store_of
        self._views: dict[tuple[int, int], tuple[Any, Any]] = {}
        rng = np.random.default_rng(seed)
        initial = [initialize(p.spec, rng) for p in graph.parameters]
        self.flat: FlatLayout | None = None
        """Replicated: where each parameter lives in the flat buffers."""
        if replicated and graph.parameters:
            self._init_flat(initial, len(state_names))
            return
        self.weights = {
            p.id: store_of(self.as_stored(p.id, value))
            for p, value in zip(graph.parameters, initial, strict=True)
        }
        self.states = {
            p.id: [self._zeros(self.stored_shape(p.id)) for _ in state_names]
            for p in graph.parameters
        }
        self.partials = self._partial_stores()
        """Per parameter, this iteration's partial gradients: one row per contributing device."""
        self.pending = self._partial_stores() if replicated else None
        """Replicated: the partial gradients of the last iteration, whose update the next step
        applies (`swap` exchanges the two sets after each step)."""

    def _init_flat(self, initial: Sequence[np.ndarray], state_count: int) -> None:
        devices = {self.contributors[p.id] for p in self.graph.parameters}
        if len(devices) != 1:  # updates_in_step holds only for one step task per device
            raise ValueError(
                f"replicated parameters need the same devices for every weight, got {devices}"
            )
        self.devices: tuple[int, ...] = devices.pop()
        """The devices that keep a copy, in the order of the copy axis."""
        params = self.graph.parameters
        self.flat = FlatLayout.of([p.spec.shape for p in params], [p.l2 for p in params])
        self.flat_weights = self._store_of(self._copies(self.flat.join(initial)))
        self.flat_states = [
            self._zeros((len(self.devices), self.flat.size)) for _ in range(state_count)
        ]
        self.flat_partials, self.flat_pending = (
            self.runtime.create_store(ty.float32, (len(self.devices), self.flat.size))
            for _ in range(2)
        )
        self._split_flat()

    def _copies(self, flat: np.ndarray) -> np.ndarray:
        """A flat buffer with a copy per device, as the replicated stores hold it."""
        return np.ascontiguousarray(np.broadcast_to(flat, (len(self.devices), flat.size)))

    def _split_flat(self) -> None:
        """Each parameter's views of the flat stores (after they are made or replaced)."""

        def per_parameter(store: Any) -> dict[int, Any]:
            views = {}
            for p in self.graph.parameters:
                start, stop = self.flat.ranges[p.id]
                views[p.id] = store.slice(1, slice(start, stop)).delinearize(1, p.spec.shape)
            return views

        self.weights = per_parameter(self.flat_weights)
        states = [per_parameter(store) for store in self.flat_states]
        self.states = {p.id: [s[p.id] for s in states] for p in self.graph.parameters}
        self.partials = per_parameter(self.flat_partials)
        self.pending = per_parameter(self.flat_pending)

    def _zeros(self, shape: tuple[int, ...]) -> Any:
        store = self.runtime.create_store(ty.float32, shape)
        self.runtime.issue_fill(store, 0.0)
        return store

    def _partial_stores(self) -> dict[int, Any]:
        return {
            p.id: self.runtime.create_store(
                ty.float32, (len(self.contributors[p.id]),) + p.spec.shape
            )
            for p in self.graph.parameters
        }

    def stored_shape(self, pid: int) -> tuple[int, ...]:
        """A weight's (and its states') store shape: a copy per contributor when replicated."""
        shape = self.graph.parameters[pid].spec.shape
        return (len(self.contributors[pid]), *shape) if self.replicated else shape

    def as_stored(self, pid: int, value: np.ndarray) -> np.ndarray:
        """`value` (a whole weight or state) laid out as its store holds it, float32."""
        value = np.asarray(value, dtype=np.float32)
        return np.ascontiguousarray(np.broadcast_to(value, self.stored_shape(pid)))

    def view(self, store: Any, pid: int, device: int) -> Any:
        """A weight or state `store` as `device`'s tasks name it: its copy there when
        replicated, else the store."""
        if not self.replicated:
            return store
        return self._copy_of(store, self.contributors[pid].index(device))

    def flat_view(self, store: Any, device: int) -> Any:
        """`device`'s copy of a flat store (replicated): its row, 1-D."""
        return self._copy_of(store, self.devices.index(device))

    def flat_argument(self, store: Any, device: int) -> tuple[Any, tuple]:
        """`device`'s copy of a flat store (replicated) as a store and its row, (1, size): what
        a concurrent launch's point names (flexflow.runtime.concurrent)."""
        k = self.devices.index(device)
        return store, ((k, k + 1), (0, store.shape[1]))

    def pending_update_arguments(
        self, device: int, row: Callable[[Any, int], Any]
    ) -> tuple[list[Any], list[Any]]:
        """(read, written): what a step that first applies the pending update to `device`'s
        copies names, each flat row as `row(store, device)` gives it (`flat_view` for a task,
        `flat_argument` for a point of a concurrent launch): every device's row of the pending
        partial gradients and the copy's states read; the copy and its states written."""
        copies = [row(s, device) for s in (self.flat_weights, *self.flat_states)]
        return [row(self.flat_pending, d) for d in self.devices] + copies[1:], copies

    def device_rows(self, store: Any) -> Any:
        """A flat `store` (replicated) partitioned into the devices' copies, a row each: the
        point d of a launch over the devices names row d (`flexflow.runtime.step_launches`)."""
        return self._kept(store, -1, lambda: store.partition_by_tiling((1, store.shape[1])))

    def _copy_of(self, store: Any, k: int) -> Any:
        # a slice first: Legate keeps the devices' copies apart (a projection of the whole
        # store made the devices' step tasks wait for each other)
        return self._kept(store, k, lambda: store.slice(0, slice(k, k + 1)).project(0, 0))

    def _kept(self, store: Any, k: int, make: Callable[[], Any]) -> Any:
        """`make()`, a view of `store`, kept under (store, k) while the store is."""
        key = (id(store), k)
        found = self._views.get(key)
        if found is None or found[0] is not store:
            found = (store, make())
            self._views[key] = found
        return found[1]

    def swap(self) -> None:
        """Replicated, after a step: its partial gradients become the pending ones."""
        self.partials, self.pending = self.pending, self.partials
        if self.flat is not None:
            self.flat_partials, self.flat_pending = self.flat_pending, self.flat_partials

    def value(self, store: Any) -> np.ndarray:
        """A weight or state store's value (the first copy's: the copies are identical), read
        from a copy: see `read_store`."""
        value = read_store(self._store_of(store))
        return value[0].copy() if self.replicated else value

    def replace_weights(self, values: Mapping[int, np.ndarray]) -> None:
        """New stores for the weights of these parameters, holding `values` (whole weights)."""
        if self.flat is None:
            for pid, value in values.items():
                self.weights[pid] = self._store_of(self.as_stored(pid, value))
            return
        self.flat_weights = self._replaced(self.flat_weights, values)
        self._split_flat()

    def replace_states(self, values: Mapping[int, Sequence[np.ndarray]]) -> None:
        """New stores for the optimizer states of these parameters (`values`: per parameter,
        one whole array per state)."""
        if self.flat is None:
            for pid, states in values.items():
                self.states[pid] = [self._store_of(self.as_stored(pid, v)) for v in states]
            return
        for k, store in enumerate(self.flat_states):
            self.flat_states[k] = self._replaced(store, {p: v[k] for p, v in values.items()})
        self._split_flat()

    def _replaced(self, store: Any, values: Mapping[int, np.ndarray]) -> Any:
        """A new flat store: `store`'s values with these parameters' replaced."""
        flat = self.value(store)
        for view, value in zip(self.flat.split(flat, values), values.values(), strict=True):
            view[...] = value
        return self._store_of(self._copies(flat))
