"""Training iterations of an operator graph under a SOAP strategy, as Legate tasks (paper §7).

Every tensor, weight and gradient is a Legate store. Each task of an op's configuration runs on
its strategy's processor (a `Scope` of that one CPU or GPU), reading the store slices its input
and weight regions name and writing its output tile; Legate moves the data between
processors. Consecutive ops whose tiles line up run as one task per device
(`flexflow.fusion`, as FlexFlow's FusedOp): LeNet under data parallelism is one task per
device and iteration; intermediate tensors' gradients never leave the task.

`Executor` holds one model's stores under one strategy and runs its iterations: what an
iteration issues, in which order, is `flexflow.runtime.iteration`'s; a fused group's pass and
the updates, `flexflow.runtime.pass_tasks`'; the tasks' bodies, `flexflow.runtime.tasks`';
what a model has trained, `flexflow.runtime.trained_state`'s.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from legate.core import Scope, get_legate_runtime
from legate.core import types as ty
from threadpoolctl import threadpool_limits

from flexflow.allocator import keep_freed_memory
from flexflow.checkpoint import DataPosition
from flexflow.errors import FlexFlowError, ShapeError
from flexflow.graph import OperatorGraph
from flexflow.launches import iteration_tasks
from flexflow.machine import parse_machine
from flexflow.ops.base import Region
from flexflow.ops.blas import sgemm_address
from flexflow.ops.checks import is_int
from flexflow.optimizers import Optimizer, SGDOptimizer, same_kind
from flexflow.runtime import iteration, trained_state
from flexflow.runtime.batch_statistics import BatchStatistics
from flexflow.runtime.batches import BatchStats, UnreadBatches
from flexflow.runtime.collection import COLLECTION, collect_due
from flexflow.runtime.feeding import Feeds
from flexflow.runtime.gradients import GradientStores
from flexflow.runtime.kernel_report import describe_kernels
from flexflow.runtime.native_step import NativeStep, native_steps_of
from flexflow.runtime.pass_tasks import issue_pending_update
from flexflow.runtime.passes import Pass
from flexflow.runtime.plan import execution_plan
from flexflow.runtime.processors import device_processors
from flexflow.runtime.statistics_exchange import StatisticsExchange
from flexflow.runtime.step_launches import StepLaunch, plan_step_launch
from flexflow.runtime.stores import LEGATE_TYPES, copied_store
from flexflow.runtime.task_arguments import TaskArguments
from flexflow.runtime.task_context import EXECUTOR_IDS, EXECUTORS
from flexflow.runtime.tasks import library_and_tasks
from flexflow.runtime.trace import take_step_logs
from flexflow.runtime.weights import ParameterStores
from flexflow.strategy import Strategy
from flexflow.strategy_file import validate_strategy
from flexflow.task_modes import seeded_for_run


class Executor:
    """Holds the stores of one model and runs training iterations under one strategy."""

    def __init__(
        self,
        graph: OperatorGraph,
        strategy: Strategy,
        seed: int = 0,
        learning_rate: float = 0.01,
        record_timeline: bool = False,
        optimizer: Optimizer | None = None,
        cpp_steps: bool = True,
        steps_per_execution: int = 1,
    ) -> None:
        """`cpp_steps=False` keeps every step task in a Python body (flexflow.runtime.native_tasks
        says which run in C++ otherwise): the same numbers, for comparing the two.
        `steps_per_execution` > 1 runs that many iterations of `train_batches` per Legate launch
        where it can (`flexflow.runtime.step_launches`; `steps_per_launch` says whether it
        does): the same numbers, less runtime overhead."""
        if not is_int(steps_per_execution) or steps_per_execution < 1:
            raise FlexFlowError(
                f"steps_per_execution must be a positive integer, got {steps_per_execution!r}."
            )
        graph = seeded_for_run(graph, seed)  # dropout masks differ between seeds, as weights
        self.graph, self.strategy = graph, strategy
        self.cpp_steps = cpp_steps
        self.optimizer: Optimizer = optimizer or SGDOptimizer(learning_rate)
        self._init_progress(record_timeline)
        self._start_runtime()
        self._place_on_local_machine(graph, strategy)
        self._load_tasks()
        self.id = next(EXECUTOR_IDS)
        EXECUTORS[self.id] = self
        COLLECTION.hold()  # collections by the program only, until close (runtime.collection)
        try:  # a failure below must not leave it registered and collection off
            staging = self.runtime.node_count == 1  # one process holds every rank's data
            self._plan_execution(graph, strategy, staging)
            self._create_stores(graph, strategy, staging, seed)
            self._prepare_native_steps(strategy, record_timeline)
            self._plan_step_launch(steps_per_execution)
        except BaseException:
            EXECUTORS.pop(self.id, None)
            COLLECTION.release()
            raise

    # ---- the set-up, in __init__'s order -------------------------------------------------------
    def _init_progress(self, record_timeline: bool) -> None:
        """What training has done so far (nothing yet), and the timeline's records if kept."""
        self.iteration = 0
        """Updates applied so far (Adam's bias correction counts them; checkpoints keep it)."""
        self.steps_before = 0
        """Training steps the model took before this optimizer's first (a model compiled
        again: `take_trained_state`); checkpoints keep it. See `steps_trained`."""
        self.position: DataPosition | None = None
        """Where `fit` stands in its data after whole epochs (`flexflow.checkpoint.DataPosition`;
        checkpoints keep it); None before any, or from a checkpoint that does not record it."""
        self.tasks_issued = 0
        """Legate tasks this executor has created (`tasks_per_iteration` predicts them)."""
        self.cpp_steps_issued = 0
        """Of them, step tasks with C++ bodies (flexflow.runtime.native_tasks)."""
        self.unread = UnreadBatches()
        """Batches issued since the last one known finished (`flexflow.runtime.batches`)."""
        self.timeline_entries: list[tuple] | None = [] if record_timeline else None
        """What Python task bodies append to `timeline` as they run (C++ bodies log theirs in C,
        taken when `timeline` is read)."""
        self.step_ops_entries: list[tuple] | None = [] if record_timeline else None
        """What the C steps' logs say about their ops (`step_ops_timeline`)."""

    def _start_runtime(self) -> None:
        """Legate's runtime, one BLAS thread per task, and freed memory kept for reuse."""
        self.runtime = get_legate_runtime()
        # each Legate CPU processor is one core: a multi-threaded BLAS inside its tasks would
        # oversubscribe the cores (LeNet's iteration was 5x slower with 2 BLAS threads each)
        threadpool_limits(1, user_api="blas")
        keep_freed_memory()

    def _place_on_local_machine(self, graph: OperatorGraph, strategy: Strategy) -> None:
        """Check the strategy against this host's `local` machine; each device's processor."""
        local = parse_machine("local")
        validate_strategy(strategy, graph, local)
        self.machine = local
        """The `local` machine the strategy's devices are numbered on."""
        self.processors = device_processors(local, strategy)
        """Per device id of the `local` machine, the one Legate processor its tasks run on."""

    def _load_tasks(self) -> None:
        """The Legate library and the ids of the tasks this executor launches."""
        (self.library, self.task_id, self.native_task_id, self.steps_task_id,
         self.evals_task_id) = library_and_tasks()  # fmt: skip

    def _plan_execution(self, graph: OperatorGraph, strategy: Strategy, staging: bool) -> None:
        """What runs where (`flexflow.runtime.plan`), and the groups' statistics exchanges."""
        self._kinds = kinds = [kind for kind, _ in self.machine.kind_ordinals()]
        self.plan = plan = execution_plan(graph, strategy, kinds, staging)
        """What runs where (`flexflow.runtime.plan.ExecutionPlan`, which documents each part);
        its parts are also this executor's attributes of the same names."""
        self._regions, self.groups = plan.regions, plan.groups
        self.fused_tasks, self.step_ready = plan.fused_tasks, plan.step_ready
        self.contributors = plan.contributors
        self.updates_in_step, self.update_groups = plan.updates_in_step, plan.update_groups
        self.exchanges = {
            g: StatisticsExchange(strategy[group.ops[0]].num_tasks)
            for g, group in enumerate(self.groups)
            if group.exchanges
        }
        """Per group launched concurrently (`FusedGroup.exchanges`), the in-memory all-reduce
        of batch statistics between its points."""
        self.pending_update = False
        """With `updates_in_step`: the last iteration's update has not been applied yet."""

    def _create_stores(
        self, graph: OperatorGraph, strategy: Strategy, staging: bool, seed: int
    ) -> None:
        """The stores of the inputs, tensors, gradients, weights and batch statistics, and the
        views of them that the tasks name."""
        self.store_of = functools.partial(
            copied_store, self.runtime, self.library, self.task_id, self.id
        )
        """array -> a new store holding it (`copied_store`); no reference to the executor, so
        the stores that keep it (`ParameterStores`) make no cycle that Python's garbage
        collector would free inside a task, where Legate forbids destroying stores."""
        self.feeds = Feeds(
            graph,
            strategy,
            self._regions,
            staging,
            self.plan.inputs_read_in_step,
            self._tensor_store,
        )
        """Model inputs: staged in this process or fed to stores (`flexflow.runtime.feeding`)."""
        self.tensors = {t.id: self._tensor_store(t.spec) for t in graph.tensors}
        self.gradients = GradientStores(
            self.runtime, graph, self.groups, self.fused_tasks, strategy
        )
        """Tensors' gradients, some in several parts (`flexflow.runtime.gradients`)."""
        self.grads = self.gradients.stores
        """Tensor -> its gradient store."""
        self.params = ParameterStores(
            self.runtime,
            graph,
            self.contributors,
            self.optimizer.state_names,
            self.updates_in_step,  # a copy of every weight and state per device
            self.store_of,
            seed,
        )
        """Weights, optimizer states and per-device partial gradients (`flexflow.runtime.weights`)."""
        rows = {op: self.exchanges[g].points for g in self.exchanges for op in self.groups[g].ops}
        tasks = {node.id: strategy[node.id].num_tasks for node in graph.ops}
        self.batch_statistics = BatchStatistics(self.runtime, graph, self.store_of, tasks, rows)
        """Ops with batch statistics (batch norm): their statistics stores and tasks."""
        self.running = self.batch_statistics.running
        """Batch norm's running (mean, variance) per channel: what evaluation normalizes with."""
        self.arguments = TaskArguments(
            self.runtime, strategy, self._kinds, self.tensors, self.gradients, self.params,
            self.batch_statistics, self.feeds, self.contributors,
        )  # fmt: skip
        """The store views its tasks name, kept (`flexflow.runtime.task_arguments`)."""

    def _prepare_native_steps(self, strategy: Strategy, record_timeline: bool) -> None:
        """The C programs of the step tasks that run as one call, and why others do not."""
        self.sgemm = sgemm_address()
        """MKL's sgemm for the C kernels (flexflow.ops.blas); None without MKL."""
        self.native_steps: dict[tuple[int, int], NativeStep] = {}
        """(group, task index) -> the C program of a step task that runs as one call
        (flexflow.runtime.native_step): the last group's tasks on CPUs, when they can."""
        self.native_step_note: str | None = None
        """Why a CPU step task does not run as one C call (the first such task's reason)."""
        if self.step_ready[-1]:
            last = len(self.groups) - 1
            devices = strategy[self.groups[last].ops[0]].devices
            programs, self.native_step_note = native_steps_of(
                self.fused_tasks[last], [self._kinds[d] for d in devices], self.params.flat,
                self.exchanges.get(last), record_timeline,
            )  # fmt: skip
            self.native_steps = {(last, index): program for index, program in programs.items()}

    def _plan_step_launch(self, steps_per_execution: int) -> None:
        """How `train_batches` launches several steps at once, if it can."""
        self.step_launch = plan_step_launch(self) if steps_per_execution > 1 else None
        """How `train_batches` runs several steps per launch (`flexflow.runtime.step_launches`),
        or why it cannot (a str); None with `steps_per_execution` 1."""
        self.steps_per_launch = (
            steps_per_execution if isinstance(self.step_launch, StepLaunch) else 1
        )
        """The iterations one launch of `train_batches` runs."""

    @property
    def timeline(self) -> list[tuple] | None:
        """(op, task, pass, start s, end s, thread) of every task, measured inside the task
        bodies (the thread, its Linux id, tells the processor that ran it); None unless the
        executor records a timeline. A step task run as one C call (flexflow.runtime.native_step)
        counts as one FUSED_STEP entry of its last op, after an UPDATE entry (op -1) for the
        pending update it applied first."""
        self._take_step_logs()
        return self.timeline_entries

    @property
    def step_ops_timeline(self) -> list[tuple] | None:
        """Inside the steps run as one C call (the FUSED_STEP entries of `timeline`), each op's
        forward and backward and the loss (the last op's LOSS), as `timeline`'s entries; None
        unless the executor records a timeline."""
        self._take_step_logs()
        return self.step_ops_entries

    def _take_step_logs(self) -> None:
        """Move what the C steps logged since the last take into `timeline` and
        `step_ops_timeline` (`flexflow.runtime.trace.take_step_logs`), once every task issued
        has ended: the last iteration's tasks may still be running when it is read."""
        if self.timeline_entries is not None:
            self.runtime.issue_execution_fence(block=True)
            take_step_logs(self.native_steps, self.groups, self.timeline_entries,
                           self.step_ops_entries)  # fmt: skip

    def apply_pending(self) -> None:
        """Apply the update the next step would have applied (before the weights are read,
        replaced, or used for anything but a training step)."""
        if not self.pending_update:
            return
        self.pending_update = False
        if self.params.flat is None:  # a model without weights (copies of weights are flat)
            return
        issue_pending_update(self)

    def _tensor_store(self, spec):
        return self.runtime.create_store(LEGATE_TYPES[spec.dtype.value], spec.shape)

    def describe_kernels(self) -> str:
        """What runs this executor's CPU tiles, for a run's log (`flexflow.runtime.kernel_report`)."""
        return describe_kernels(self)

    def check_open(self) -> None:
        """Raise FlexFlowError once `close` has run: task bodies look the executor up by its
        id, and a task of a closed one would abort the process. Every launch checks it, from
        the program: where the garbage due is collected too (`runtime.collection`)."""
        collect_due()
        if self.id not in EXECUTORS:
            raise FlexFlowError(
                "this executor was closed (Executor.close); compile the model again to train "
                "or evaluate it."
            )

    def close(self) -> None:
        """Wait for this executor's tasks and release it (and its stores) from the registry."""
        self.runtime.issue_execution_fence(block=True)
        if EXECUTORS.pop(self.id, None) is not None:
            COLLECTION.release()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def tasks_per_iteration(self) -> int:
        """The Legate tasks one `train_batch` issues (fills aside): what fusion saves, and what
        the simulator charges the runtime's per-task cost on (`flexflow.launches`)."""
        return iteration_tasks(
            self.graph, self.strategy, self._kinds, self.feeds.staging, self._regions
        ).total

    def has_statistics(self, group_id: int) -> bool:
        """Whether the group is an op whose tasks share batch statistics (alone, run by
        `batch_statistics`; `flexflow.fusion.shared_statistics`)."""
        return self.groups[group_id].shared_statistics

    def regions(self, op: int) -> tuple[Region, ...]:
        return self._regions[op]

    def input_shard(self, tensor_id: int, index: int) -> Region:
        return self.feeds.shards[tensor_id][index][0]

    def staged_tile(self, key: int, region: Region) -> np.ndarray:
        """A task body's tile of a batch staged in this process (`Feeds.staged_tile`)."""
        return self.feeds.staged_tile(key, region)

    # ---- what it has trained (flexflow.runtime.trained_state) ----------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """Every weight by name (`<layer>.<weight>`), as numpy arrays."""
        return trained_state.weights_of(self)

    def set_weights(self, values: Mapping[str, np.ndarray]) -> None:
        """Replace the weights named in `values` (each checked first: `replace_weights`)."""
        trained_state.replace_weights(self, values)

    def take_trained_state(self, other: Executor) -> None:
        """Continue from what `other` (the same model, any strategy) has trained."""
        trained_state.take_trained_state(self, other)

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Write what this executor has trained to `path`, atomically."""
        return trained_state.save_checkpoint(self, path)

    def load_checkpoint(self, path: str | os.PathLike[str]) -> None:
        """Restore what `save_checkpoint` wrote, so training resumes bit-identically."""
        trained_state.load_checkpoint(self, path)

    def forget_views(self) -> None:
        """Drop the kept views of stores (`TaskArguments.forget`): after stores are replaced."""
        self.arguments.forget()

    @property
    def steps_trained(self) -> int:
        """Training steps the model has taken: what dropout's masks are drawn for, so a model
        compiled again (its optimizer afresh: `iteration` 0) draws new masks, not the first
        epoch's again."""
        return self.steps_before + self.iteration

    @property
    def epochs_done(self) -> int:
        """Whole epochs `fit` has trained (`position`; 0 before any): where a resumed run's
        `fit(..., initial_epoch=...)` starts."""
        return 0 if self.position is None else self.position.epochs

    def epochs_done_in(self, batches_per_epoch: int) -> int:
        """`epochs_done`, or where none is recorded (a checkpoint of a flexflow before
        session 34) the whole epochs its iterations make in epochs of `batches_per_epoch`:
        `fit` given it as `initial_epoch` goes on inside the epoch the run stopped in."""
        if self.position is not None or batches_per_epoch < 1:
            return self.epochs_done
        return self.iteration // batches_per_epoch

    def set_optimizer(self, optimizer: Optimizer) -> None:
        """Train on with `optimizer`: new hyperparameters (a learning rate schedule) for an
        optimizer of the same kind and states, whose states carry over. Iterations issued
        before keep the old ones: the pending update is applied and the running tasks (whose
        Python bodies read `self.optimizer`) are waited for first."""
        old = self.optimizer
        if not same_kind(old, optimizer):
            raise FlexFlowError(
                f"set_optimizer: the model trains with {old} (states: "
                f"{', '.join(old.state_names) or 'none'}); a new optimizer must be the same kind "
                f"with the same states, got {optimizer}; compile the model again to change it."
            )
        self.apply_pending()
        self.runtime.issue_execution_fence(block=True)
        self.optimizer = optimizer

    # ---- one iteration -----------------------------------------------------------------------
    def new_task(self, device: int, which: Pass, op: int, index: int, *extra: int):
        """A task on processor `device`; run it with `.execute()` after adding its stores."""
        task = self.created_task(device, self.task_id)
        for value in (self.id, int(which), op, index, *extra):
            task.add_scalar_arg(value, ty.int64)
        return task

    def created_task(self, device: int, task_id: int):
        """A task of `task_id` on processor `device`, counted: every single task is made here
        (the launches of several points: `runtime.concurrent`, `runtime.step_launches`)."""
        self.check_open()  # and collects: here, not inside a task body, where freeing aborts
        with Scope(machine=self.processors[device]):
            task = self.runtime.create_auto_task(self.library, task_id)
        self.tasks_issued += 1
        return task

    def forward(
        self, inputs: Mapping[str, np.ndarray], read: bool = True, training: bool = False
    ) -> np.ndarray | None:
        """Run the forward pass on `inputs` (by input tensor name); the model's output.
        Dropout drops only in `training` mode."""
        return iteration.forward(self, inputs, read, training)

    @property
    def device_kinds(self) -> tuple[str, ...]:
        """Each device's kind ('cpu' or 'gpu'), by device id."""
        return tuple(self._kinds)

    def train_batches(
        self,
        batches: Sequence[tuple[Mapping[str, np.ndarray], Any, int | None]],
        loss: str = "mean_squared_error",
    ) -> list[BatchStats]:
        """Issue one training iteration per (inputs, target, valid) without waiting,
        `steps_per_launch` in each Legate launch where they can (`flexflow.runtime.
        step_launches`: sparse categorical cross-entropy on numpy labels), else one each as
        `train_batch`; their results, in order."""
        return iteration.train_batches(self, batches, loss)

    def eval_batches(
        self,
        batches: Sequence[tuple[Mapping[str, np.ndarray], Any, int | None]],
        loss: str = "mean_squared_error",
    ) -> list[BatchStats]:
        """Issue the forward pass and the loss of each (inputs, target, valid) without waiting,
        `steps_per_launch` batches in each Legate launch where training steps launch so
        (`flexflow.runtime.step_launches.issue_evaluations`: sparse categorical cross-entropy
        on numpy labels), else one each as `eval_batch`; their results, in order."""
        return iteration.eval_batches(self, batches, loss)

    def feed_inputs(self, inputs: Mapping[str, np.ndarray]) -> None:
        for tensor in self.graph.input_tensors:
            if tensor.name not in inputs:
                raise ShapeError(
                    f"no data for the model input '{tensor.name}' {tensor.spec.shape}; "
                    f"got {sorted(map(str, inputs))}."
                )
            self.feeds.feed(self, tensor.id, inputs[tensor.name])

    @property
    def output(self) -> int:
        """The model's output tensor: the first output of the last op."""
        return self.graph.ops[-1].outputs[0]

    def train_batch(
        self,
        inputs: Mapping[str, np.ndarray],
        target,
        loss: str = "mean_squared_error",
        valid: int | None = None,
    ) -> BatchStats:
        """Issue one training iteration (forward, loss, backward, update) without waiting;
        samples past `valid` (padding) add nothing to the loss or the gradients."""
        return iteration.train_batch(self, inputs, target, loss, valid)

    def eval_batch(
        self,
        inputs: Mapping[str, np.ndarray],
        target,
        loss: str = "mean_squared_error",
        valid: int | None = None,
    ) -> BatchStats:
        """Issue the forward pass and the loss of one batch; only its first `valid` samples
        count (the rest pad a last, short batch)."""
        return iteration.eval_batch(self, inputs, target, loss, valid)

    def step(
        self,
        inputs: Mapping[str, np.ndarray],
        target: np.ndarray,
        loss: str = "mean_squared_error",
    ) -> float:
        """One training iteration on `loss` against `target` (labels for sparse
        cross-entropy); the loss before the update."""
        return self.train_batch(inputs, target, loss).loss
