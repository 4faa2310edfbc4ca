"""A model's parameters in Legate stores: weights, optimizer states and partial gradients.

Each parameter has a weight store, one store per optimizer state (momentum, Adam's moments)
shaped like it, and a store of partial gradients with a leading device axis: each device whose
backward tasks compute part of the gradient (its *contributors*) adds into its own row, and the
update sums the rows in device order (a Legate reduction from tasks on several processors into
one store made Legate run them one after the other).

Replicated (data parallelism with updates inside the step, `Executor.updates_in_step`): the
weight and state stores get a leading axis too, one copy per contributing device, and there are
two sets of partial gradient stores that swap each iteration, so a step writes one set while
the next step's update reads the other. A device's tasks see their copy through `view`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from legate.core import types as ty

from flexflow.graph import OperatorGraph
from flexflow.ops.init import initialize
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
        self.weights = {
            p.id: store_of(self.as_stored(p.id, initialize(p.spec, rng))) for p in graph.parameters
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
        key = (id(store), device)
        found = self._views.get(key)
        if found is None or found[0] is not store:
            k = self.contributors[pid].index(device)
            # a slice first: Legate keeps the devices' copies apart (a projection of the whole
            # store made the devices' step tasks wait for each other)
            found = (store, store.slice(0, slice(k, k + 1)).project(0, 0))
            self._views[key] = found
        return found[1]

    def swap(self) -> None:
        """Replicated, after a step: its partial gradients become the pending ones."""
        self.partials, self.pending = self.pending, self.partials

    def value(self, store: Any) -> np.ndarray:
        """A weight or state store's value (the first copy's: the copies are identical)."""
        value = read_store(store)
        return value[0].copy() if self.replicated else value

    def replace_weight(self, pid: int, value: np.ndarray) -> None:
        self.weights[pid] = self._store_of(self.as_stored(pid, value))

    def replace_states(self, pid: int, values: Sequence[np.ndarray]) -> None:
        self.states[pid] = [self._store_of(self.as_stored(pid, v)) for v in values]
