"""What every task graph of one (operator graph, machine, cost model) shares: memoized geometry and task times.

A search builds thousands of task graphs of the same model on the same machine; the tiles of
an op under given degrees, the overlaps between producer and consumer tiles, the weight
regions and the task times depend only on degrees (not on devices), so they are computed once
per (op kind, degrees) here. An op kind (`op_kinds`) is every op that is the same operator on
the same shapes: the unrolled steps of an LSTM layer, the repeated blocks of a ResNet stage
(NMT's 167 ops are 47 kinds, ResNet-101's 279 are 48), so a layer move or a chain reaching a
repeated block's configuration computes its geometry once, not once per op. Equal tiles have
equal shapes, so one task time serves all tasks of an op configuration on one kind of device
(the paper's cache, §5.1). What the C block builders take of an op under one configuration
is also made once: its compute tasks (`op_tasks`) and its tasks' reads of each parameter
(`op_sync_parts`, templates in `sync_table`).

`SimContext` holds the settings and the launch model here; what it memoizes comes from one
module each: tiles and overlaps (tile_geometry.py, the overlaps computed in C by
native/overlaps.c), task times (task_times.py), synchronization templates
(sync_templates.py), and the numbered sets of devices and links tasks hold with the routes
between devices (resources.py).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from flexflow.cost import LEGATE_CPP_TASK_S, LEGATE_CPU_TASK_S, CostModel, TaskTime
from flexflow.graph import OperatorGraph
from flexflow.launches import LaunchCounter
from flexflow.machine import Machine
from flexflow.ops.base import Region
from flexflow.simulator.native_blocks import OverlapPool, Routes, SyncTable, SyncTemplate
from flexflow.simulator.resources import ResourceSets, RouteTables
from flexflow.simulator.sync_templates import SyncTemplates
from flexflow.simulator.task_times import OpTasks, TaskTimes
from flexflow.simulator.tile_geometry import Overlap, TileGeometry
from flexflow.strategy import ParallelConfig


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


class SimContext(TileGeometry, TaskTimes, SyncTemplates, RouteTables):
    """What every task graph of one (operator graph, machine, cost model) shares: the settings
    of the run it plans and the launch model (here), the tiles and overlaps (`TileGeometry`),
    task times (`TaskTimes`), synchronization templates (`SyncTemplates`) and routes
    (`RouteTables`) it memoizes."""

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
        self._kind_op_times: dict[tuple[int, ParallelConfig, bool, bool], tuple[array, array]] = {}
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
