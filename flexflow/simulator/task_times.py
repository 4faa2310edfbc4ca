"""A context's task times (paper §5.1: a task's exe_time, measured or estimated once per op
configuration and device model): each op's compute tasks under a configuration as the C op
builder takes them, update tasks, statistics all-reduces, and the C step's times where a whole
step runs as one C call per device.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from dataclasses import dataclass

from flexflow.cost import DEVICE_CONSTANTS, CostModel, TaskTime
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.machine_parts import Device
from flexflow.simulator.keys import (
    A_SHIFT,
    B_SHIFT,
    BWD_KEY,
    DEVICE_TASK,
    FIELD_LIMIT,
    FWD_KEY,
    KIND_SHIFT,
)
from flexflow.strategies import sample_split
from flexflow.strategy import ParallelConfig


@dataclass(frozen=True, slots=True)
class OpTasks:
    """An op's compute tasks under one configuration (`SimContext.op_tasks`): the forward
    task of task k at 2k, its backward at 2k + 1."""

    devices: array  # "i": each task's device (its resource set)
    exe: array  # "d"
    order: array  # "Q": its key, flagged as a device task


class TaskTimes:
    """`SimContext`'s task times: equal tiles have equal shapes, so one time serves every task
    of an op kind's configuration on one device model (the paper's cache, §5.1). Reads the
    tiles (`TileGeometry.regions`) and routes (`RouteTables.transfer`) of the context."""

    # what SimContext sets (flexflow/simulator/context.py), with the caches _times,
    # _native_splits, _native_degrees, _op_tasks, _kind_op_times and _orders
    graph: OperatorGraph
    machine: Machine
    cost: CostModel
    kinds: tuple[int, ...]
    serial_launches: bool
    prices_native_steps: bool

    def task_time(self, op: int, degrees: tuple[int, ...], device: Device) -> TaskTime:
        key = (self.kinds[op], degrees, device.model)
        found = self._times.get(key)
        if found is None:
            node = self.graph.ops[op]
            region = self.regions(op, degrees)[0]
            found = self.cost.task_time(node, region, device, self.graph.computes_input_grads(op))
            self._times[key] = found
        return found

    def native_time(self, op: int, degrees: tuple[int, ...], device: Device) -> TaskTime | None:
        """A task's time inside the C step (`Profile.native_times`), None where not measured."""
        node = self.graph.ops[op]
        region = self.regions(op, degrees)[0]
        return self.cost.native_time(node, region, device, self.graph.computes_input_grads(op))

    def native_split(self, op: int, config: ParallelConfig) -> tuple | None:
        """What `op`'s configuration shares with every other op's when the whole step runs as
        one C call per device (`flexflow.runtime.native_step`): its sample degree and devices,
        for a split by sample alone over consecutive CPUs in ascending order (as the runtime
        launches a group whose batch norms exchange statistics) of one model, whose C step the
        profile measured (`Profile.native_times`), in a run on CPUs under sparse cross-entropy;
        None otherwise. A strategy whose ops all give one such value is priced by the C step's
        times (`TaskGraph.native`)."""
        key = (op, config)
        if key not in self._native_splits:
            self._native_splits[key] = self._native_split(op, config)
        return self._native_splits[key]

    def _native_split(self, op: int, config: ParallelConfig) -> tuple | None:
        degree, first = len(config.devices), config.devices[0]
        if (
            not self.prices_native_steps
            or config.devices != tuple(range(first, first + degree))
            or config != sample_split(self.graph.ops[op], config.devices)
        ):
            return None
        model = self.machine.devices[config.devices[0]].model
        if any(self.machine.devices[d].model != model for d in config.devices):
            return None
        if not self._measured_natively(degree, model):
            return None
        return (degree, config.devices)

    def _measured_natively(self, degree: int, model: str) -> bool:
        """Whether the profile holds every op's C step time at `degree` on `model`."""
        found = self._native_degrees.get((degree, model))
        if found is None:
            device = next(d for d in self.machine.devices if d.model == model)
            devices = tuple(range(degree))
            found = self._native_degrees[(degree, model)] = all(
                self.native_time(node.id, sample_split(node, devices).degrees, device) is not None
                for node in self.graph.ops
            )
        return found

    def update_time(self, elements: int, device: Device) -> float:
        """An update task's time; under `serial_launches` its launch is in `runtime_s`."""
        update_s = self.cost.update_time(elements, device)
        if self.serial_launches:
            update_s -= DEVICE_CONSTANTS[device.kind].launch_overhead_s
        return update_s

    def op_tasks(
        self, op: int, config: ParallelConfig, fused: bool, native: bool = False
    ) -> OpTasks:
        """The compute tasks of `op` under `config`, as the C op builder takes them: a forward
        and a backward task per task of the configuration (interleaved), on its device, timed
        by the cost model plus the statistics all-reduce it waits for; `fused`: it runs inside
        the previous op's task (`flexflow.fusion.joins_previous`) and pays no launch, as under
        `serial_launches`, where its launch is in `runtime_s`; `native`: inside the step's one
        C call per device (`TaskGraph.native`), timed as the profile measured it there, the
        statistics' exchange included."""
        key = (op, config, fused, native)
        found = self._op_tasks.get(key)
        if found is None:
            n = len(config.devices)
            if n >= FIELD_LIMIT:  # task, ring and group indices fit a key
                raise AssertionError(f"{self.graph.ops[op].name}: {n} tasks; keys hold fewer")
            kind_key = (self.kinds[op], config, fused, native)
            times = self._kind_op_times.get(kind_key)
            if times is None:  # the same for every op of the kind: only the keys are the op's
                times = self._kind_op_times[kind_key] = self._op_times(op, config, fused, native)
            found = self._op_tasks[key] = OpTasks(*times, self._op_order(op, n))
        return found

    def _op_times(
        self, op: int, config: ParallelConfig, fused: bool, native: bool
    ) -> tuple[array, array]:
        """`op_tasks`' devices and exe_times."""
        node = self.graph.ops[op]
        n = len(config.devices)
        devices = array("i", [device for device in config.devices for _ in (0, 1)])
        if native:
            time = self.native_time(op, config.degrees, self.machine.devices[config.devices[0]])
            if time is None:
                raise AssertionError(f"{node.name}: no C step time for {config}")
            return devices, array("d", [time.forward_s, time.backward_s] * n)
        stats_s = self.statistics_s(op, config)
        # a task's time depends on its device's model and kind only: once per kind of device
        times: dict[tuple[str, str], tuple[float, float]] = {}
        exe: list[float] = []
        for device in config.devices:
            on = self.machine.devices[device]
            pair = times.get((on.model, on.kind))
            if pair is None:
                time = self.task_time(op, config.degrees, on)
                if fused or self.serial_launches:
                    launch = DEVICE_CONSTANTS[on.kind].launch_overhead_s
                    time = TaskTime(
                        max(0.0, time.forward_s - launch), max(0.0, time.backward_s - launch)
                    )
                pair = times[(on.model, on.kind)] = (
                    time.forward_s + stats_s,
                    time.backward_s + stats_s,
                )
            exe += pair
        return devices, array("d", exe)

    def _op_order(self, op: int, n: int) -> array:
        """The keys of `op`'s forward and backward task k (interleaved) for k < n: the same
        for every configuration of n tasks (the arrays are only read)."""
        found = self._orders.get((op, n))
        if found is None:
            fwd_key = FWD_KEY << KIND_SHIFT | op << A_SHIFT | DEVICE_TASK
            bwd_key = BWD_KEY << KIND_SHIFT | op << A_SHIFT | DEVICE_TASK
            found = self._orders[(op, n)] = array(
                "Q", [key | k << B_SHIFT for k in range(n) for key in (fwd_key, bwd_key)]
            )
        return found

    def statistics_s(self, op: int, config: ParallelConfig) -> float:
        """Time of the statistics all-reduce a task of `op` waits for (0 for most ops): its
        ring over the devices of the tasks the statistics' dimensions are split over, each
        step bounded by the slowest hop."""
        node = self.graph.ops[op]
        if not node.op.statistics_dims:
            return 0.0
        split = [
            degree
            for dim, degree in zip(node.sig.dims, config.degrees, strict=True)
            if dim.name in node.op.statistics_dims and degree > 1
        ]
        if not split:
            return 0.0
        ring = math.prod(split)
        region = self.regions(op, config.degrees)[0]
        size = 2 * (ring - 1) / ring * 4 * node.op.statistics_elements(node.sig, region)
        devices = sorted(set(config.devices))
        hops = zip(devices, devices[1:] + devices[:1], strict=True)
        worst = max((self.transfer(a, b, size)[1] for a, b in hops if a != b), default=0.0)
        return worst * (ring - 1)


def one_native_split(splits: Counter) -> bool:
    """Whether every op of a count of `native_split`s has one, the same (`TaskGraph.native`)."""
    return len(splits) == 1 and next(iter(splits)) is not None
