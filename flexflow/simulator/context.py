"""What every task graph of one (operator graph, machine, cost model) shares: memoized geometry and task times.

A search builds thousands of task graphs of the same model on the same machine; the tiles of
an op under given degrees, the overlaps between producer and consumer tiles, the weight
regions and the task times depend only on degrees (not on devices), so they are computed once
per (op kind, degrees) here. An op kind (`op_kinds`) is every op that is the same operator on
the same shapes: the unrolled steps of an LSTM layer, the repeated blocks of a ResNet stage
(NMT's 167 ops are 47 kinds, ResNet-101's 279 are 48), so a layer move or a chain reaching a
repeated block's configuration computes its geometry once, not once per op. Equal tiles have
equal shapes, so one task time serves all tasks of an op configuration on one kind of device
(the paper's cache, §5.1). The overlaps are computed in
C (native/overlaps.c), and the sets of devices and links tasks hold are numbered here once
(`ResourceSets`) for the C event loop. What the C block builders take of an op under one
configuration is also made once: its compute tasks (`op_tasks`) and its tasks' reads of each
parameter (`op_sync_parts`, templates in `sync_table`).
"""

from __future__ import annotations

import itertools
import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from flexflow.cost import (
    DEVICE_CONSTANTS,
    LEGATE_CPP_TASK_S,
    LEGATE_CPU_TASK_S,
    CostModel,
    TaskTime,
)
from flexflow.graph import OperatorGraph
from flexflow.launches import LaunchCounter
from flexflow.machine import Device, Machine
from flexflow.ops.base import Region, region_volume
from flexflow.simulator.keys import (
    A_SHIFT,
    B_SHIFT,
    BWD_KEY,
    DEVICE_TASK,
    FIELD_LIMIT,
    FWD_KEY,
    KIND_SHIFT,
)
from flexflow.simulator.native_blocks import OverlapPool, Routes, SyncTable, SyncTemplate
from flexflow.simulator.native_overlaps import OverlapArrays, grid_overlap_arrays
from flexflow.strategies import sample_split
from flexflow.strategy import ParallelConfig

Overlap = tuple[int, int, int]  # (consumer task, producer task, overlap volume in elements)


def op_kinds(graph: OperatorGraph) -> tuple[int, ...]:
    """Per op, the id of its kind: ops with equal operators (hyperparameters), signatures
    (shapes), patterns of repeated weights and input gradients (computed or not: an op reading
    only model inputs computes none) share one. Everything `SimContext` memoizes but the task
    keys and devices is a function of the kind, never of the op's name or id."""
    ids: dict[tuple, int] = {}
    return tuple(
        ids.setdefault(
            (
                node.op,
                node.sig,
                tuple(node.weights.index(p) for p in node.weights),
                graph.computes_input_grads(node.id),
            ),
            len(ids),
        )
        for node in graph.ops
    )


class ResourceSets:
    """The distinct sets of resources tasks hold, numbered, in arrays the C event loop reads.

    A task stores one id instead of a tuple, so the C side sees every task's devices and links
    without per-call conversion. Set d is device d alone; `empty` (num_devices) is no resource
    (barriers); routes are added as they are first used. Set s holds
    members[offsets[s]:offsets[s + 1]].
    """

    def __init__(self, num_devices: int) -> None:
        self.sets: list[tuple[int, ...]] = []
        self.offsets = array("i", [0])
        self.members = array("i")
        self._ids: dict[tuple[int, ...], int] = {}
        for device in range(num_devices):
            self.intern((device,))
        self.empty = self.intern(())

    def intern(self, resources: tuple[int, ...]) -> int:
        found = self._ids.get(resources)
        if found is None:
            found = self._ids[resources] = len(self.sets)
            self.sets.append(resources)
            self.members.extend(resources)
            self.offsets.append(len(self.members))
        return found


@dataclass(frozen=True, slots=True)
class OpTasks:
    """An op's compute tasks under one configuration (`SimContext.op_tasks`): the forward
    task of task k at 2k, its backward at 2k + 1."""

    devices: array  # "i": each task's device (its resource set)
    exe: array  # "d"
    order: array  # "Q": its key, flagged as a device task


class SimContext:
    def __init__(
        self,
        graph: OperatorGraph,
        machine: Machine,
        cost: CostModel | None = None,
        fused_launches: bool = False,
        serial_launches: bool | None = None,
        cores: int | None = None,
        sparse_labels: bool = False,
        steps_per_execution: int = 1,
    ) -> None:
        self.graph, self.machine = graph, machine
        self.cost = cost or CostModel()
        self.sparse_labels = sparse_labels
        self.fused_launches = fused_launches
        """Model this project's runtime, which runs an op inside the task of the op before it
        where their tiles line up (`flexflow.fusion`): such an op pays no launch overhead.
        Off for the paper's simulator (the presets, exhaustive search, whose bound assumes
        a launch per op); on when planning a run on the `local` machine."""
        if serial_launches is None:
            serial_launches = fused_launches and all(d.kind == "cpu" for d in machine.devices)
        self.serial_launches = serial_launches
        """This runtime on CPU processors only (the default where `fused_launches` is on and
        every device is a CPU): each Legate task it issues costs `LEGATE_CPU_TASK_S` of CPU
        time on the cores the kernels run on (`runtime_s`), instead of a launch overhead on its
        device, and an iteration lasts at least the cores' whole work over `cores`
        (`TaskGraph.iteration_s`; `flexflow.launches` says why). False gives the per-device
        model."""
        self.cores = (cores or max(machine.most_cpus_on_a_node(), 1)) * machine.num_nodes
        """The cores the run's kernels and runtime share: by default one per CPU processor
        (Legate's default), on every node (summed: the bound treats the nodes as one pool)."""
        # one rank reads model inputs from its process; several feed them through stores
        kinds = [d.kind for d in machine.devices]
        self._launches = LaunchCounter(
            graph,
            kinds,
            staging=machine.num_nodes == 1,
            sparse_labels=sparse_labels,
            steps_per_execution=steps_per_execution,
        )
        """`sparse_labels`: the planned run's loss is sparse categorical cross-entropy, so its
        dense-chain steps run in C++ bodies; `steps_per_execution`: the planned run's
        iterations per launch where its C++ steps allow (`FFConfig.steps_per_execution`; see
        `flexflow.launches`)."""
        self.fusion = self._launches.memo.fusion
        """The fusion tests made so far (`flexflow.fusion.FusionMemo`), shared by the launch
        counts and the task graphs' `joins_previous`."""
        self.num_devices = machine.num_devices
        self.num_resources = machine.num_devices + len(machine.links)
        self.resource_sets = ResourceSets(machine.num_devices)
        self.kinds = op_kinds(graph)
        """Each op's kind (`op_kinds`): the caches below are keyed by kind, not op."""
        edge_kinds: dict[tuple, int] = {}
        self._edge_kinds = tuple(
            tuple(
                edge_kinds.setdefault(
                    (self.kinds[node.id], j, self._producer_kind(tensor)), len(edge_kinds)
                )
                for j, tensor in enumerate(node.inputs)
            )
            for node in graph.ops
        )
        """Per op and input, the kind of that edge: the consumer's kind, the input and the
        producer's kind (which dimensions its tiles split): what its overlaps depend on."""
        self._kind_sync_parts: dict[tuple[int, ParallelConfig], tuple[SyncTemplate, ...]] = {}
        self._orders: dict[tuple[int, int], array] = {}
        self._weight_groups: dict[tuple, tuple[tuple[Region, tuple[int, ...]], ...]] = {}
        self._regions: dict[tuple[int, tuple[int, ...]], tuple[Region, ...]] = {}
        self._times: dict[tuple[int, tuple[int, ...], str], TaskTime] = {}
        self._weights: dict[tuple[int, tuple[int, ...]], tuple[tuple[Region, ...], ...]] = {}
        self._overlaps: dict[tuple, tuple[Overlap, ...]] = {}
        self._overlap_sets: dict[tuple, tuple[int, int]] = {}
        self.overlap_pool = OverlapPool()
        """Every overlap set `overlap_set` made, as the C edge builder reads them."""
        self._route_tables: tuple[array, array, array, array] | None = None
        self._op_tasks: dict[tuple[int, ParallelConfig, bool, bool], OpTasks] = {}
        self._native_degrees: dict[tuple[int, str], bool] = {}
        self.prices_native_steps = (
            self.serial_launches
            and sparse_labels
            and machine.num_nodes == 1
            and bool(self.cost.profile.native_times)
        )
        """Whether some strategy may be priced by C step times (`native_split`): a run of one
        process on CPUs under sparse cross-entropy with a profile that measured them. Not with
        several ranks: the profile measures splits over one node's CPUs, and pricing those
        by their C steps but a split over every node's op by op would favour leaving nodes
        idle."""
        self._native_splits: dict[tuple[int, ParallelConfig], tuple | None] = {}
        self.sync_table = SyncTable()
        """Every template `op_sync_parts` made, as the C sync builder reads them."""
        self._routes_view: Routes | None = None
        self._inputs: dict[tuple[int, tuple[int, ...]], tuple[tuple[Region, ...], ...]] = {}
        self._needs: dict[tuple[int, int, tuple[int, ...]], array] = {}
        self._routes: dict[tuple[int, int], tuple[tuple[int, ...], float, float]] = {}

    def _producer_kind(self, tensor: int) -> int:
        """The kind of the op writing `tensor`, -1 for a model input."""
        producer = self.graph.tensor(tensor).producer
        return -1 if producer is None else self.kinds[producer]

    def regions(self, op: int, degrees: tuple[int, ...]) -> tuple[Region, ...]:
        """Output tile of each task (row-major over the degrees)."""
        key = (self.kinds[op], degrees)
        found = self._regions.get(key)
        if found is None:
            # tile_region for every coordinate, as the product of each dimension's ranges
            shape = self.graph.ops[op].sig.output_shape
            ranges = [
                [(c * (size // d), (c + 1) * (size // d)) for c in range(d)]
                for size, d in zip(shape, degrees, strict=True)
            ]
            found = tuple(itertools.product(*ranges))
            self._regions[key] = found
        return found

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

    def native_time(self, op: int, degrees: tuple[int, ...], device: Device) -> TaskTime | None:
        """A task's time inside the C step (`Profile.native_times`), None where not measured."""
        node = self.graph.ops[op]
        region = self.regions(op, degrees)[0]
        return self.cost.native_time(node, region, device, self.graph.computes_input_grads(op))

    def task_time(self, op: int, degrees: tuple[int, ...], device: Device) -> TaskTime:
        key = (self.kinds[op], degrees, device.model)
        found = self._times.get(key)
        if found is None:
            node = self.graph.ops[op]
            region = self.regions(op, degrees)[0]
            found = self.cost.task_time(node, region, device, self.graph.computes_input_grads(op))
            self._times[key] = found
        return found

    def weight_regions(self, op: int, degrees: tuple[int, ...]) -> tuple[tuple[Region, ...], ...]:
        """For each task, the region of each of the op's weights it reads."""
        key = (self.kinds[op], degrees)
        found = self._weights.get(key)
        if found is None:
            node = self.graph.ops[op]
            found = tuple(node.op.weight_regions(node.sig, r) for r in self.regions(op, degrees))
            self._weights[key] = found
        return found

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

    def overlaps(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> tuple[Overlap, ...]:
        """Every (consumer task, producer task, volume) whose tiles meet along input `j`."""
        key = (self._edge_kinds[consumer][j], p_degrees, c_degrees)
        found = self._overlaps.get(key)
        if found is None:  # the pool's set as tuples: computed once for both readers
            number, count = self.overlap_set(consumer, j, p_degrees, c_degrees)
            pool, at = self.overlap_pool, self.overlap_pool.at[number]
            found = self._overlaps[key] = tuple(
                zip(pool.consumer[at : at + count], pool.producer[at : at + count],
                    pool.volume[at : at + count], strict=True)
            )  # fmt: skip
        return found

    def _compute_overlaps(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> OverlapArrays:
        node = self.graph.ops[consumer]
        tensor = self.graph.tensor(node.inputs[j])
        producer = self.graph.ops[tensor.producer]
        shape = tensor.spec.shape
        # producer tiles of this output form a grid: degree 1 where the op cannot split
        grid = tuple(
            deg if dim.partitionable else 1
            for deg, dim in zip(p_degrees, producer.sig.dims, strict=True)
        )
        steps = [size // deg for size, deg in zip(shape, grid, strict=True)]
        needs_key = (self.kinds[consumer], j, c_degrees)
        needs = self._needs.get(needs_key)
        if needs is None:  # each consumer tile's (lo, hi) per dimension, flat
            regions = self.input_regions(consumer, c_degrees)
            needs = array("q", [x for tile in regions for bounds in tile[j] for x in bounds])
            self._needs[needs_key] = needs
        return grid_overlap_arrays(needs, math.prod(c_degrees), steps, grid)

    def overlap_set(
        self, consumer: int, j: int, p_degrees: tuple[int, ...], c_degrees: tuple[int, ...]
    ) -> tuple[int, int]:
        """`overlaps` as a set of the context's pool (`overlap_pool`), as the C edge builder
        reads them: (its number, how many overlaps)."""
        key = (self._edge_kinds[consumer][j], p_degrees, c_degrees)
        found = self._overlap_sets.get(key)
        if found is None:
            columns = self._compute_overlaps(consumer, j, p_degrees, c_degrees)
            found = self._overlap_sets[key] = (self.overlap_pool.add(columns), len(columns[0]))
        return found

    def routes(self) -> Routes:
        """`route_tables` as the C block builders read them (made once)."""
        if self._routes_view is None:
            self._routes_view = Routes(self.route_tables(), self.num_devices)
        return self._routes_view

    def update_time(self, elements: int, device: Device) -> float:
        """An update task's time; under `serial_launches` its launch is in `runtime_s`."""
        update_s = self.cost.update_time(elements, device)
        if self.serial_launches:
            update_s -= DEVICE_CONSTANTS[device.kind].launch_overhead_s
        return update_s

    def steps_per_launch(self, configs: Sequence[ParallelConfig]) -> int:
        """The training steps `fit` runs per launch under `configs` (`flexflow.launches`)."""
        return self._launches(configs).steps_per_launch

    def runtime_s(self, configs: Sequence[ParallelConfig]) -> float:
        """The runtime's CPU time per iteration under `serial_launches`: its Legate tasks
        (`flexflow.launches`) times `LEGATE_CPU_TASK_S`, `LEGATE_CPP_TASK_S` for those with C++
        bodies, which count once per launch of several iterations' steps; 0 otherwise."""
        if not self.serial_launches:
            return 0.0
        tasks = self._launches(configs)
        return (tasks.total - tasks.cpp_steps) * LEGATE_CPU_TASK_S + (
            tasks.cpp_launches * LEGATE_CPP_TASK_S
        )

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
            found = self._op_tasks[key] = self._make_op_tasks(op, config, fused, native)
        return found

    def _make_op_tasks(self, op: int, config: ParallelConfig, fused: bool, native: bool) -> OpTasks:
        node = self.graph.ops[op]
        n = len(config.devices)
        if n >= FIELD_LIMIT:  # task, ring and group indices fit a key
            raise AssertionError(f"{node.name}: {n} tasks; keys hold fewer")
        if native:
            time = self.native_time(op, config.degrees, self.machine.devices[config.devices[0]])
            if time is None:
                raise AssertionError(f"{node.name}: no C step time for {config}")
            exe = array("d", [time.forward_s, time.backward_s] * n)
            devices = array("i", [device for device in config.devices for _ in (0, 1)])
            return OpTasks(devices, exe, self._op_order(op, n))
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
        devices = array("i", [device for device in config.devices for _ in (0, 1)])
        return OpTasks(devices, array("d", exe), self._op_order(op, n))

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

    def route_tables(self) -> tuple[array, array, array, array]:
        """Every (src, dst) pair's route, at [src * num_devices + dst], as the C block builders
        read it: the id of its links in `resource_sets`, its latency and bandwidth, and the
        flag a transfer's order gets (`DEVICE_TASK` where the route holds a link); src == dst
        has no route (bandwidth 1, never read)."""
        if self._route_tables is None:
            sets, latency, bandwidth, flags = array("i"), array("d"), array("d"), array("Q")
            for src in range(self.num_devices):
                for dst in range(self.num_devices):
                    res, lat, bw = self.route(src, dst) if src != dst else ((), 0.0, 1.0)
                    sets.append(self.resource_sets.intern(res))
                    latency.append(lat)
                    bandwidth.append(bw)
                    flags.append(DEVICE_TASK if res else 0)
            self._route_tables = (sets, latency, bandwidth, flags)
        return self._route_tables

    def input_regions(self, op: int, degrees: tuple[int, ...]) -> tuple[tuple[Region, ...], ...]:
        """For each task, the region of each input it reads (shared by all producer degrees)."""
        key = (self.kinds[op], degrees)
        found = self._inputs.get(key)
        if found is None:
            node = self.graph.ops[op]
            found = tuple(node.op.input_regions(node.sig, r) for r in self.regions(op, degrees))
            self._inputs[key] = found
        return found

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float]:
        """(resource ids of the route's links, total latency, bottleneck bandwidth)."""
        found = self._routes.get((src, dst))
        if found is None:
            links = self.machine.route(src, dst)
            found = (
                tuple(self.num_devices + link.id for link in links),
                sum(link.latency_s for link in links),
                min(link.bandwidth_bytes_per_s for link in links),
            )
            self._routes[(src, dst)] = found
        return found

    def transfer(self, src: int, dst: int, size_bytes: float) -> tuple[tuple[int, ...], float]:
        """Resources and time of a transfer: it holds every link of its route (cut-through)."""
        res, latency, bandwidth = self.route(src, dst)
        return res, latency + size_bytes / bandwidth
