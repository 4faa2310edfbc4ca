"""Measure task times on this host's CPU processors: the profile the simulator's costs come from.

The paper measures each distinct (op, tile shape, device) once and caches it (assumption A1);
this does the same for the CPU devices of a machine (the `local` one), running each op's
forward and backward tile kernels (the same functions the Legate tasks run; no input gradient
for an op reading only model inputs, as in the runtime) on random data of the tile's input and
weight regions, with as many copies running at once as the tile's
configuration has tasks (they share the host as the op's tasks do), and adding the measured
cost of one Legate Python task (`TASK_OVERHEAD_S`); it also measures the rate of an optimizer
update over the model's weights, every processor updating at once. The result is a
`flexflow.cost.Profile`, which overrides the analytic roofline for every key it holds, so a
search on `local` optimizes the times this host has.
GPU devices are measured on a GPU by `flexflow.gpu.profile` (scripts/gpu_profile.py).
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from flexflow.allocator import keep_freed_memory
from flexflow.cost import DEVICE_CONSTANTS, UPDATE_BYTES_PER_ELEMENT, Profile, TaskTime, cost_key
from flexflow.errors import FlexFlowError, MachineError
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import Machine
from flexflow.ops.base import Region, region_shape
from flexflow.ops.init import initialize
from flexflow.optimizers import SGDOptimizer
from flexflow.space import enumerate_configs
from flexflow.step_profiler import measure_native, run_together, sample_degrees

TASK_OVERHEAD_S = DEVICE_CONSTANTS["cpu"].launch_overhead_s
"""What issuing and running one Legate Python task adds to its kernel (measured here: a chain
of copy tasks ran at 110-170 us each; the cost model's 175 us)."""


def _inputs(node: OpNode, region: Region, rng: np.random.Generator) -> list[np.ndarray]:
    """Random float32 inputs (zeros for ids, valid for any table) of the task of `region`."""
    arrays = []
    for spec, r in zip(node.sig.inputs, node.op.input_regions(node.sig, region), strict=True):
        shape = region_shape(r)
        if spec.dtype.is_float:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
        else:
            arrays.append(np.zeros(shape, dtype=spec.dtype.value))  # valid ids for any table
    return arrays


def _weights(node: OpNode, region: Region, rng: np.random.Generator) -> list[np.ndarray]:
    """The initialized weights' parts the task of `region` reads."""
    arrays = []
    for spec, r in zip(node.sig.weights, node.op.weight_regions(node.sig, region), strict=True):
        whole = initialize(spec, rng)
        arrays.append(np.ascontiguousarray(whole[tuple(slice(a, b) for a, b in r)]))
    return arrays


def median_seconds(runs: Sequence[Callable[[], object]], repeats: int) -> float:
    """The median time of one call of each of `runs`, all started together `repeats` times,
    each in its own thread (one alone runs in this thread)."""
    if len(runs) == 1:
        times = []
        for _ in range(repeats):
            begin = time.perf_counter()
            runs[0]()
            times.append(time.perf_counter() - begin)
        return statistics.median(times)
    times: list[list[float]] = [[] for _ in runs]

    def timed(index: int) -> Callable[[int], None]:
        def call(_: int) -> None:
            begin = time.perf_counter()
            runs[index]()
            times[index].append(time.perf_counter() - begin)

        return call

    run_together([timed(i) for i in range(len(runs))], 0, repeats)
    return statistics.median(t for per_thread in times for t in per_thread)


def measure_tile(
    node: OpNode,
    region: Region,
    repeats: int = 3,
    seed: int = 0,
    concurrent: int = 1,
    input_grads: bool = True,
) -> TaskTime:
    """The median time of the op's forward and backward kernels on one tile while `concurrent`
    copies of them (each on its own arrays) run at the same moments in other threads, plus one
    task's overhead each. An op's tasks run on that many processors at once and share the host
    (the interpreter lock that numpy's small calls hold, memory bandwidth, caches): the RNNLM's
    LSTM tiles took 1.5x as long two at a time as alone on this project's 2-core host.
    `input_grads` False: the backward computes no input gradient, as the runtime's does not for
    an op reading only model inputs (LeNet's first convolution's backward took 1.64 ms with its
    input gradient, 0.33 ms without it in the runtime's step)."""
    op, sig = node.op, node.sig
    forwards, backwards = [], []
    for _ in range(concurrent):
        rng = np.random.default_rng(seed)
        inputs, weights = _inputs(node, region, rng), _weights(node, region, rng)
        outputs = op.forward_tile(sig, region, inputs, weights)  # also warms both kernels up
        grads = [np.ones_like(o) for o in outputs]
        backward = functools.partial(
            op.backward_tile_into, sig, region, inputs, weights, outputs, grads, input_grads, ()
        )
        backward()
        forwards.append(functools.partial(op.forward_tile, sig, region, inputs, weights))
        backwards.append(backward)
    forward, backward = median_seconds(forwards, repeats), median_seconds(backwards, repeats)
    return TaskTime(TASK_OVERHEAD_S + forward, TASK_OVERHEAD_S + backward)


def profile_graph(
    graph: OperatorGraph,
    machine: Machine,
    repeats: int = 3,
    on_op: Callable[[int, int], None] | None = None,
) -> Profile:
    """Measured times of every distinct tile of every op's configurations on the machine's CPU
    devices (`on_op(done, total)` reports progress), and of every op inside the C step of each
    split of the whole model by sample over up to as many CPUs (`flexflow.step_profiler`)."""
    models = {d.model for d in machine.devices if d.kind == "cpu"}
    if not models:
        raise MachineError(
            f"machine '{machine.name}' has no CPU devices to measure; the profiler times tasks "
            f"on this host's CPU processors: use --machine local."
        )
    if repeats < 1:
        raise FlexFlowError(f"profile: repeats must be at least 1, got {repeats}.")
    times: dict = {}
    # processors that can run at once
    most = max(1, min(machine.most_cpus_on_a_node(), os.cpu_count() or 1))
    keep_freed_memory()  # as the Executor does: kernels timed without page faults
    with threadpool_limits(1, user_api="blas"):  # as in a Legate CPU task: one core each
        for done, node in enumerate(graph.ops):
            # no input gradient where every input is a model input (nothing reads it)
            input_grads = graph.computes_input_grads(node.id)
            _profile_op(node, machine, models, repeats, times, most, input_grads)
            if on_op is not None:
                on_op(done + 1, len(graph.ops))
        elements = sum(int(np.prod(p.spec.shape)) for p in graph.parameters)
        rate = measure_update(max(elements, 1), repeats, most)
        native = {}  # each whole-model sample split's C step, once, for every CPU model
        for degree in sample_degrees(graph, most):
            measured = measure_native(graph, degree, "", repeats)
            native.update(
                (key[:-1] + (model,), time) for key, time in measured.items() for model in models
            )
    return Profile(times, dict.fromkeys(models, rate), native)


def measure_update(elements: int, repeats: int = 3, concurrent: int = 1) -> float:
    """Bytes per second (`UPDATE_BYTES_PER_ELEMENT` per weight) of an SGD update of `elements`
    float32 weights from `concurrent` devices' partial gradients (`apply_partials`, as a
    data-parallel step applies it), with `concurrent` copies updating at once, as every device
    of data parallelism does."""
    runs = []
    for _ in range(concurrent):
        weight = np.ones(elements, np.float32)
        partials = [np.ones(elements, np.float32) for _ in range(concurrent)]
        runs.append(functools.partial(SGDOptimizer(1e-9).apply_partials, weight, partials, (), 1))
        runs[-1]()  # warm-up: the pages are touched before timing
    seconds = median_seconds(runs, repeats)
    return UPDATE_BYTES_PER_ELEMENT * elements / max(seconds, 1e-9)


def distinct_tiles(node: OpNode, machine: Machine, most: int) -> dict[tuple, tuple[Region, int]]:
    """The op's distinct tile shapes over its configurations on `machine`: a tile of each and
    how many of its configuration's tasks run at once (at most `most`)."""
    tiles: dict[tuple, tuple[Region, int]] = {}
    for config in enumerate_configs(node.sig, machine):
        region = config.task_regions(node.sig.output_shape)[0]
        tiles.setdefault(region_shape(region), (region, min(config.num_tasks, most)))
    return tiles


def profile_coverage(profile: Profile, graph: OperatorGraph, machine: Machine) -> tuple[int, int]:
    """(how many of the distinct tasks of `graph` on `machine`'s devices, CPUs and GPUs, `profile`
    holds, how many there are): a profile measured for another model, batch size or machine
    prices the rest by the analytic model."""
    models = {d.model for d in machine.devices}
    keys = {
        cost_key(node, shape, model, graph.computes_input_grads(node.id))
        for node in graph.ops
        for shape in distinct_tiles(node, machine, 1)
        for model in models
    }
    return sum(key in profile.times for key in keys), len(keys)


def coverage_note(
    path: str, profile: Profile, graph: OperatorGraph, machine: Machine, model: str = "MODEL"
) -> str:
    """What a user should know of `profile` (file `path`) for `graph` (the model `model`) on
    `machine`: empty where it holds every task; else how much it holds and how to measure the
    rest (CPU tasks here with `flexflow profile`, GPU tasks on a GPU with
    scripts/gpu_profile.py)."""
    held, total = profile_coverage(profile, graph, machine)
    if held == total:
        return ""
    batch = graph.input_tensors[0].spec.shape[0]
    kinds = {d.kind for d in machine.devices}
    how = " and ".join(
        {
            "cpu": f"CPU tasks here, flexflow profile {model} --machine {machine.name} "
            f"--batch-size {batch} --out FILE",
            "gpu": f"GPU tasks on a host with that GPU, python scripts/gpu_profile.py {model} "
            f"--machine {machine.name} --batch-size {batch} --out FILE",
        }[kind]
        for kind in sorted(kinds)
    )
    if len(kinds) > 1:
        how += " (one --profile file holds both: merge them with flexflow.cost.Profile.merged)"
    what = " and ".join(sorted(k.upper() for k in kinds))
    return (
        f"profile {path} holds {held} of the {total} distinct {what} tasks of this model on "
        f"'{machine.name}' at batch {batch} (it was measured for another model, batch size or "
        f"machine); the rest are priced by the analytic model. Measure them: {how}."
    )


def _profile_op(
    node: OpNode,
    machine: Machine,
    models: set[str],
    repeats: int,
    times: dict,
    most: int,
    input_grads: bool = True,
):
    """Each distinct tile of the op's configurations, timed with as many copies running at once
    as the configuration has tasks (at most `most`: the processors of a node and this host's
    cores): a tile's shape fixes its degrees, hence its task count."""
    for shape, (region, concurrent) in distinct_tiles(node, machine, most).items():
        measured = None
        for model in models:
            key = cost_key(node, shape, model, input_grads)
            if key not in times:
                measured = measured or measure_tile(
                    node, region, repeats, concurrent=concurrent, input_grads=input_grads
                )
                times[key] = measured
