"""A context's synchronization templates (paper §5.1: the all-reduce and update of each
replicated parameter): the tasks of an op's configuration grouped by the weight region they
read, made once per op kind and configuration into templates of the C sync builder's table.
"""

from __future__ import annotations

from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.ops.base import Region, region_volume
from flexflow.simulator.native_blocks import SyncTable, SyncTemplate
from flexflow.strategy import ParallelConfig


class SyncTemplates:
    """`SimContext`'s parameter synchronization, keyed by op kind. Reads the weight regions
    (`TileGeometry.weight_regions`) and update times (`TaskTimes.update_time`) of the context."""

    # what SimContext sets (flexflow/simulator/context.py), with the caches _weight_groups
    # and _kind_sync_parts
    graph: OperatorGraph
    machine: Machine
    kinds: tuple[int, ...]
    sync_table: SyncTable

    def op_sync_groups(
        self, op: int, pid: int, config: ParallelConfig
    ) -> tuple[tuple[Region, tuple[int, ...], tuple[int, ...]], ...]:
        """The tasks of `op` under `config` that read parameter `pid`, grouped by the weight
        region they read: (region, devices, task indices), in task order; what a task graph
        gathers over the parameter's users to build its synchronization. Not memoized: the
        sync templates made from it are (`op_sync_parts`)."""
        w = self.graph.ops[op].weights.index(pid)
        on = config.devices
        return tuple(
            (region, tuple(dict.fromkeys(on[k] for k in tasks)), tasks)
            for region, tasks in self._tasks_by_weight_region(op, w, config.degrees)
        )

    def _tasks_by_weight_region(
        self, op: int, w: int, degrees: tuple[int, ...]
    ) -> tuple[tuple[Region, tuple[int, ...]], ...]:
        """The tasks of `op` under `degrees` grouped by the region of its weight `w` they
        read, in task order: the same for every placement of those degrees."""
        key = (self.kinds[op], w, degrees)
        found = self._weight_groups.get(key)
        if found is None:
            groups: dict[Region, list[int]] = {}
            for k, regions in enumerate(self.weight_regions(op, degrees)):
                groups.setdefault(regions[w], []).append(k)
            found = self._weight_groups[key] = tuple((r, tuple(t)) for r, t in groups.items())
        return found

    def op_sync_parts(self, op: int, config: ParallelConfig) -> tuple[SyncTemplate, ...]:
        """`op_sync_groups` of every parameter `op` uses (`op_parameters`, in that order), as
        templates of the C sync builder's table (`sync_table`), with each device's update time
        for the region. The same for every op of its kind."""
        key = (self.kinds[op], config)
        found = self._kind_sync_parts.get(key)
        if found is None:
            found = self._kind_sync_parts[key] = tuple(
                self._sync_template(op, pid, config) for pid in self.op_parameters(op)
            )
        return found

    def op_parameters(self, op: int) -> tuple[int, ...]:
        """The parameters `op` uses, each once, in the order it names them."""
        return tuple(dict.fromkeys(self.graph.ops[op].weights))

    def _sync_template(self, op: int, pid: int, config: ParallelConfig) -> SyncTemplate:
        devices = self.machine.devices
        parts = []
        for region, on, ks in self.op_sync_groups(op, pid, config):
            volume = region_volume(region)
            # an update's time depends on the device's model alone (`Machine` holds devices
            # of one model alike): once per model, not per device of a 64-GPU group
            times: dict[str, float] = {}
            update_s = []
            for d in on:
                device = devices[d]
                time = times.get(device.model)
                if time is None:
                    time = times[device.model] = self.update_time(volume, device)
                update_s.append(time)
            parts.append((sum(region, ()), volume, on, update_s, ks))
        return self.sync_table.add(parts)
