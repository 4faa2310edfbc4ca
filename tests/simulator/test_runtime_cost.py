"""The cost of this project's runtime on CPU processors: every Legate task it issues
(flexflow.launches) costs LEGATE_CPU_TASK_S of CPU time on the cores the kernels use, instead of
a launch on its device, and an iteration lasts at least the cores' whole work."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.cost import DEVICE_CONSTANTS, LEGATE_CPU_TASK_S, CostModel
from flexflow.launches import iteration_tasks
from flexflow.machine_presets import LegateRanks, local_machine
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.simulator.task_views import COMPUTE, UPDATE
from flexflow.strategies import named_strategy
from flexflow.strategy import ParallelConfig, Strategy
from tests.simulator.test_delta import GRAPH_SEEDS, PICK, assert_delta_equals_full

ONE_HOST = LegateRanks(1, 1)


def cpus(n: int, gpus: int = 0):
    return local_machine(f"--cpus {n} --gpus {gpus}", memory_bytes=1 << 34, ranks=ONE_HOST)


def mlp():
    model = FFModel(FFConfig(batch_size=64))
    x = model.create_tensor((64, 784))
    x = model.dense(x, 512, ActiMode.AC_MODE_RELU)
    x = model.dense(x, 512, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(x, 10))
    return model.graph()


def on_one_device(graph) -> Strategy:
    return Strategy(
        tuple(n.name for n in graph.ops),
        tuple(ParallelConfig.single(len(n.sig.output_shape), 0) for n in graph.ops),
    )


def test_an_iteration_lasts_at_least_the_cores_whole_work():
    graph, machine = mlp(), cpus(2)
    context = SimContext(graph, machine, CostModel(), fused_launches=True)
    assert context.cores == 2
    kinds = [d.kind for d in machine.devices]
    bound_reached = 0
    for name in ("dp", "expert", "model", "random"):
        strategy = named_strategy(name, graph, machine, seed=3)
        tg = TaskGraph(context, strategy)
        tasks = iteration_tasks(graph, strategy, kinds).total
        assert tg.runtime_s == pytest.approx(tasks * LEGATE_CPU_TASK_S)
        # the timeline is the kernels and transfers; the cores also run the runtime's work
        full = full_simulate(tg)
        work = math.fsum(tg.exe[t] for t in tg.live_tasks() if tg.kind[t] in (COMPUTE, UPDATE))
        bound = (work + tg.runtime_s) / 2
        assert full.iteration_s == max(max(full.end), bound)  # summed exactly
        bound_reached += bound > max(full.end)
    assert bound_reached >= 2  # strategies with many tasks are held by the cores' work


def test_cpu_tasks_carry_no_launch_of_their_own_under_serial_launches():
    graph, machine = mlp(), cpus(2)
    strategy = named_strategy("model", graph, machine)  # a task per op: nothing fuses
    launch = DEVICE_CONSTANTS["cpu"].launch_overhead_s
    plain = TaskGraph(SimContext(graph, machine, CostModel()), strategy)
    serial = TaskGraph(SimContext(graph, machine, CostModel(), fused_launches=True), strategy)
    assert plain.runtime_s == 0.0
    pairs = [(plain.exe[t], serial.exe[t]) for t in plain.live_tasks() if plain.kind[t] == COMPUTE]
    assert pairs and all(b == pytest.approx(a - launch) for a, b in pairs)


def test_gpu_machines_keep_a_launch_per_device():
    graph, machine = mlp(), cpus(1, gpus=2)
    context = SimContext(graph, machine, CostModel(), fused_launches=True)
    assert not context.serial_launches
    assert TaskGraph(context, named_strategy("dp", graph, machine)).runtime_s == 0.0


def test_strategies_issuing_many_tasks_rank_behind_data_parallelism():
    """As measured on 2 Legate CPUs (benchmarks/fidelity.py: the MLP's expert strategy, 17
    tasks per iteration, ran 2.6x slower than data parallelism's 2). With a launch per
    device and none on the host, the simulator ranked the expert strategy first."""
    graph, machine = mlp(), cpus(2)

    def iteration_s(name: str, fused: bool) -> float:
        context = SimContext(graph, machine, CostModel(), fused_launches=fused)
        strategy = named_strategy(name, graph, machine)
        return full_simulate(TaskGraph(context, strategy)).iteration_s

    assert iteration_s("expert", False) < iteration_s("dp", False)  # the model before
    assert iteration_s("expert", True) > 1.5 * iteration_s("dp", True)
    one = TaskGraph(
        SimContext(graph, machine, CostModel(), fused_launches=True), on_one_device(graph)
    )
    assert one.runtime_s == pytest.approx(LEGATE_CPU_TASK_S)  # one step task in all


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_seed=GRAPH_SEEDS,
    devices=st.sampled_from((2, 3, 4)),
    start=st.sampled_from(("dp", "expert", "random")),
    moves=st.lists(st.tuples(PICK, PICK, st.booleans()), min_size=1, max_size=8),
)
def test_delta_equals_full_with_the_runtime_cost(graph_seed, devices, start, moves):
    """Changes and undos keep the runtime's share in step with a full simulation."""
    assert_delta_equals_full(graph_seed, cpus(devices), start, moves, fused_launches=True)


def test_several_ranks_feed_their_inputs_through_tasks():
    """With one rank the step tasks read the batch from the process; with several, copy tasks
    feed it (as the Executor does), and the simulator counts them."""
    graph = mlp()
    two_ranks = local_machine("--cpus 2 --gpus 0 --nodes 2", memory_bytes=1 << 34)
    assert two_ranks.num_nodes == 2
    dp = named_strategy("dp", graph, two_ranks)
    kinds = [d.kind for d in two_ranks.devices]
    fed, staged = iteration_tasks(graph, dp, kinds, False), iteration_tasks(graph, dp, kinds)
    assert fed.feeds > 0 and staged.feeds == 0
    tg = TaskGraph(SimContext(graph, two_ranks, CostModel(), fused_launches=True), dp)
    assert tg.runtime_s == pytest.approx(fed.total * LEGATE_CPU_TASK_S)


def test_a_processor_left_idle_gives_the_runtime_a_core():
    """Everything on one of two CPUs: the other core runs the runtime's work, so the
    iteration is the timeline (the bound is below it)."""
    graph, machine = mlp(), cpus(2)
    tg = TaskGraph(
        SimContext(graph, machine, CostModel(), fused_launches=True), on_one_device(graph)
    )
    full = full_simulate(tg)
    assert full.iteration_s == max(full.end)


def test_step_tasks_with_cpp_bodies_cost_the_runtime_less():
    """Under sparse cross-entropy the MLP's data-parallel steps run in C++ task bodies
    (flexflow.runtime.native_tasks) where MKL is installed: LEGATE_CPP_TASK_S each. Other
    losses, and the model split op by op, keep LEGATE_CPU_TASK_S per task."""
    from flexflow.cost import LEGATE_CPP_TASK_S
    from flexflow.ops import blas

    graph, machine = mlp(), cpus(2)
    dp = named_strategy("dp", graph, machine)
    kinds = [d.kind for d in machine.devices]
    native = blas.sgemm_address() is not None
    tasks = iteration_tasks(graph, dp, kinds, sparse_labels=True)
    assert tasks.cpp_steps == (2 if native else 0) and tasks.total == 2
    assert iteration_tasks(graph, dp, kinds).cpp_steps == 0
    sparse = SimContext(graph, machine, CostModel(), fused_launches=True, sparse_labels=True)
    other = SimContext(graph, machine, CostModel(), fused_launches=True)
    per_task = LEGATE_CPP_TASK_S if native else LEGATE_CPU_TASK_S
    assert TaskGraph(sparse, dp).runtime_s == pytest.approx(2 * per_task)
    assert TaskGraph(other, dp).runtime_s == pytest.approx(2 * LEGATE_CPU_TASK_S)
    model = named_strategy("model", graph, machine)  # nothing fuses: no step task in one call
    assert iteration_tasks(graph, model, kinds, sparse_labels=True).cpp_steps == 0


def test_planning_knows_the_sparse_loss_by_any_name_compile_takes():
    from flexflow.planning import sparse

    assert sparse("sparse_categorical_crossentropy")
    assert sparse("LOSS_SPARSE_CATEGORICAL_CROSSENTROPY")  # FlexFlow's LossType name
    assert not sparse("mse") and not sparse("categorical_crossentropy") and not sparse(None)


def on_devices(graph, devices: tuple[int, ...]) -> Strategy:
    """Data parallelism over `devices`, a sample split per device."""
    return Strategy(
        tuple(n.name for n in graph.ops),
        tuple(
            ParallelConfig((len(devices),) + (1,) * (len(n.sig.output_shape) - 1), devices)
            for n in graph.ops
        ),
    )


@pytest.mark.parametrize(
    ("cpus_", "devices", "per_launch"),
    [
        (2, (0, 1), 8),
        (4, (2, 3), 8),  # any contiguous range of processors
        (2, (1, 0), 1),  # the weights' copies are in ascending device order
        (3, (0, 2), 1),  # not contiguous
        (1, (0,), 8),
    ],
)
def test_fit_runs_several_steps_per_launch_where_the_runtime_can(cpus_, devices, per_launch):
    """Data parallelism whose steps are C++ tasks reading the batch from the process, on
    consecutive CPUs, runs K iterations per launch (flexflow.runtime.step_launches): its step
    tasks cost the runtime once per K iterations. Everything else: once per iteration."""
    from flexflow.cost import LEGATE_CPP_TASK_S
    from flexflow.ops import blas

    if blas.sgemm_address() is None:
        pytest.skip("the steps run C++ bodies only with MKL's sgemm")
    graph, machine = mlp(), cpus(cpus_)
    kinds = [d.kind for d in machine.devices]
    strategy = on_devices(graph, devices)
    tasks = iteration_tasks(graph, strategy, kinds, sparse_labels=True, steps_per_execution=8)
    assert tasks.cpp_steps == len(devices) and tasks.steps_per_launch == per_launch
    assert tasks.cpp_launches == len(devices) / per_launch
    context = SimContext(
        graph, machine, CostModel(), fused_launches=True, sparse_labels=True, steps_per_execution=8
    )
    assert TaskGraph(context, strategy).runtime_s == pytest.approx(
        len(devices) * LEGATE_CPP_TASK_S / per_launch
    )
    # one launch per iteration unless fit is asked for more; other losses run Python steps
    assert iteration_tasks(graph, strategy, kinds, sparse_labels=True).steps_per_launch == 1
    assert iteration_tasks(graph, strategy, kinds, steps_per_execution=8).steps_per_launch == 1


def test_several_processes_and_split_models_run_one_step_per_launch():
    graph = mlp()
    two_ranks = local_machine("--cpus 2 --gpus 0 --nodes 2", memory_bytes=1 << 34)
    kinds = [d.kind for d in two_ranks.devices]
    dp = named_strategy("dp", graph, two_ranks)
    fed = iteration_tasks(graph, dp, kinds, False, sparse_labels=True, steps_per_execution=8)
    assert fed.steps_per_launch == 1
    machine = cpus(2)
    kinds = [d.kind for d in machine.devices]
    model = named_strategy("model", graph, machine)
    split = iteration_tasks(graph, model, kinds, sparse_labels=True, steps_per_execution=8)
    assert split.steps_per_launch == 1 and split.cpp_launches == 0


def test_planning_prices_the_launches_fit_issues():
    """`plan_strategy` simulates the run's steps per execution: data parallelism's runtime
    share shrinks with it (and is what `write_simulation` draws)."""
    from flexflow.planning import planning_context

    graph, machine = mlp(), cpus(2)
    dp = named_strategy("dp", graph, machine)
    loss = "sparse_categorical_crossentropy"
    one = TaskGraph(planning_context(graph, machine, None, loss, 1), dp).runtime_s
    eight = TaskGraph(planning_context(graph, machine, None, loss, 8), dp).runtime_s
    from flexflow.ops import blas

    assert eight == pytest.approx(one / 8 if blas.sgemm_address() is not None else one)
