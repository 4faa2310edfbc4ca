"""Measure each op inside the training step the runtime runs as one C call per CPU device.

A strategy that splits every op the same way by sample only (data parallelism over k CPUs, or
everything on one) runs each device's whole step as one C call (flexflow.runtime.native_step):
C kernels back to back on buffers the step keeps, no task bodies in between. That is faster
than the op-by-op tasks' kernels `flexflow.profiler` times (priced so, data parallelism of
ResNet-20 and of a small transformer on 2 CPUs simulated 1.35x and 1.23x its measured time:
benchmarks/results/fidelity-s33.md), so the search underrated data parallelism against
strategies that run op by op. Here each such split's step runs, its k copies at the same
moments in k threads as its k processors run them (their batch norms exchanging statistics),
and the step's log (`NativeStep.record`) says how long each op's forward and backward took
inside it: `Profile.native_times`, which the simulator prices such strategies with
(`SimContext.native_split`, `TaskGraph.native`). No Legate here: plain threads.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np

from flexflow.cost import CostKey, TaskTime, cost_key
from flexflow.fusion import SlotKind, fused_task, sole_gradients
from flexflow.graph import OperatorGraph
from flexflow.launches import run_groups
from flexflow.machine_presets import host_memory_bytes
from flexflow.ops import blas
from flexflow.ops.base import region_shape
from flexflow.runtime.native_step import LOG_OPS, NativeStep, native_step
from flexflow.runtime.statistics_exchange import StatisticsExchange
from flexflow.strategies import data_parallel_over

WARMUP = 1
"""Steps run before the timed ones (the buffers' pages touched, the kernels' code loaded)."""
MIN_MEASURED_S = 0.2
MAX_REPEATS = 50
"""A split's steps are timed at least `repeats` times and for about MIN_MEASURED_S, at most
MAX_REPEATS times: a small model's step of 2-3 ms timed 3 times came out 0.8x-1.2x of its
median over many on this host."""
MEMORY_SHARE = 0.25
"""The share of this host's memory the steps measured at once may take (`step_bytes`): a
laptop profiling the zoo's ResNet-101 at its paper size (batch 64, 224x224) would need several
times its memory; such a model's sample splits keep their op-by-op prices."""


def step_bytes(graph: OperatorGraph, degree: int) -> int:
    """About what the C steps of a split `degree` ways by sample hold in all: every op's output
    and its gradient, every weight and its gradient on each device."""
    outputs = sum(
        int(np.prod(spec.shape)) * spec.dtype.itemsize for node in graph.ops
        for spec in node.sig.outputs
    )  # fmt: skip
    weights = sum(int(np.prod(p.spec.shape)) * 4 for p in graph.parameters)
    return 2 * outputs + 2 * degree * weights


def sample_degrees(graph: OperatorGraph, most: int) -> list[int]:
    """The degrees k <= `most` whose data parallelism (`data_parallel_over`) splits every op k
    ways: each op's batch divides."""
    return [
        k
        for k in range(1, most + 1)
        if all(c.num_tasks == k for c in data_parallel_over(graph, k).configs)
    ]


def native_steps(graph: OperatorGraph, degree: int) -> list[NativeStep] | None:
    """The C programs of `data_parallel_over(graph, degree)`'s step tasks, one per device, their
    batch norms sharing one statistics exchange; None unless the whole model fuses into one
    task per device and each runs as one C call (every op has a C kernel, MKL's sgemm is
    there)."""
    strategy = data_parallel_over(graph, degree)
    regions = [
        config.task_regions(node.sig.output_shape)
        for node, config in zip(graph.ops, strategy.configs, strict=True)
    ]
    groups = run_groups(graph, strategy, regions, ("cpu",) * degree)  # as the runtime fuses
    if len(groups) != 1:
        return None
    (group,) = groups
    sole = sole_gradients(graph, strategy, regions, groups)
    norms = any(node.op.statistics_dims for node in graph.ops)
    exchange = StatisticsExchange(degree) if norms and degree > 1 else None
    steps = []
    for index in range(degree):
        task = fused_task(graph, group, index, [regions[op][index] for op in group.ops], sole)
        step = native_step(task, exchange=exchange)
        if step is None:
            return None
        steps.append(step)
    return steps


def measure_native(
    graph: OperatorGraph,
    degree: int,
    device_model: str,
    repeats: int = 3,
    seed: int = 0,
) -> dict[CostKey, TaskTime]:
    """Each op's (forward, backward) inside the C step of data parallelism over `degree` CPUs
    (`data_parallel_over`) on one tile,
    by cost key: the median over `repeats` steps or more (`MIN_MEASURED_S`) of each of its
    `degree` copies (run at once, one thread each, with as many BLAS threads as the caller
    allows). The loss counts into the last op's backward (it starts it); ops the step runs as
    views of their input cost 0. Empty where the step is not one C call (`native_steps`), or
    where its buffers would take more than `MEMORY_SHARE` of this host's memory."""
    if step_bytes(graph, degree) > MEMORY_SHARE * host_memory_bytes():
        return {}
    steps = native_steps(graph, degree) if blas.sgemm_address() is not None else None
    if steps is None:
        return {}
    rng = np.random.default_rng(seed)
    calls = [_step_call(step, degree, rng) for step in steps]
    begin = time.perf_counter()
    run_together(calls, 0, WARMUP)
    took = (time.perf_counter() - begin) / WARMUP
    count = max(repeats, min(MAX_REPEATS, math.ceil(MIN_MEASURED_S / max(took, 1e-6))))
    for step in steps:
        step.record(capacity=4 * count * (2 * len(step.program.ops) + 4))
    run_together(calls, WARMUP, count)
    keys = {
        node.id: cost_key(node, region_shape(config.task_regions(node.sig.output_shape)[0]),
                          device_model, graph.computes_input_grads(node.id))
        for node, config in zip(graph.ops, data_parallel_over(graph, degree).configs, strict=True)
    }  # fmt: skip
    # (key, pass) -> seconds of each op with that key in each call, over every copy and call
    samples: dict[tuple[CostKey, str], list[float]] = defaultdict(list)
    for step in steps:
        per_call: list[dict[tuple[int, str], float]] = []
        for begin, end, _, what in step.take_log():  # in order; a call starts at its first op
            if what == LOG_OPS:
                per_call.append(defaultdict(float))
            if what >= LOG_OPS and per_call:
                op, which = step.op_pass(what)
                per_call[-1][(op, "backward" if which == "loss" else which)] += end - begin
        for call in per_call:
            for op, key in keys.items():
                for which in ("forward", "backward"):
                    samples[(key, which)].append(call.get((op, which), 0.0))
    return {
        key: TaskTime(
            statistics.median(samples[(key, "forward")]),
            statistics.median(samples[(key, "backward")]),
        )
        for key in dict.fromkeys(keys.values())
    }


def _step_call(step: NativeStep, degree: int, rng: np.random.Generator) -> Callable[[int], None]:
    """A call of `step` on arrays of its shapes (model inputs and weights: small random floats,
    token ids 0; labels: class 0) that runs training step `iteration`."""
    task = step.task
    readers = {slot: which for which, (slot, _) in enumerate(step.program.inputs)}
    values = {}
    for slot in task.forward.inputs:
        if slot.kind == SlotKind.RUNNING:  # named per call (`running` below)
            continue
        shape = region_shape(slot.region)
        which = readers.get(slot)
        if which is not None:
            dtype = step.program.dtype(which)
            values[slot] = (
                (rng.standard_normal(shape) * 0.1).astype(dtype)
                if dtype.kind == "f"
                else np.zeros(shape, dtype)
            )
        else:  # a weight
            values[slot] = np.ascontiguousarray(
                rng.standard_normal(shape).astype(np.float32) * 0.05
            )
    grads = {
        slot: np.zeros(region_shape(slot.region), np.float32) for slot in task.backward.overwrites
    }
    running = [
        (np.stack([np.zeros(c), np.ones(c)]), np.empty((2, c)))
        for c in (region_shape(slot.region)[-1] for _, slot in step.norms)
    ]
    labels = np.zeros(step.prediction_shape[:-1], np.int64)
    total = int(np.prod(step.prediction_shape[:-1])) * degree
    valid = step.prediction_shape[0]
    sums = np.zeros(2)
    gemm = blas.sgemm_address()

    def call(iteration: int) -> None:
        step.run(gemm, values, grads, labels, sums, total, valid, iteration, running)

    return call


def run_together(calls: Sequence[Callable[[int], None]], first: int, count: int) -> None:
    """Each of `calls` `count` times (iterations `first` on) in its own thread, the threads
    starting each call at the same moment, as the tasks of one configuration start on their
    processors (a failure in one stops the others and is raised here)."""
    start = threading.Barrier(len(calls))
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            for iteration in range(first, first + count):
                start.wait()
                calls[index](iteration)
        except threading.BrokenBarrierError:
            pass  # another copy failed: its error is the one to report
        except BaseException as exc:  # noqa: BLE001 (re-raised in the calling thread)
            failures.append(exc)
            start.abort()  # the other copies stop waiting for this one

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
