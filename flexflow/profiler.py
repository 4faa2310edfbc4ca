"""Measure task times on this host's CPU processors: the profile the simulator's costs come from.

The paper measures each distinct (op, tile shape, device) once and caches it (assumption A1);
this does the same for the CPU devices of a machine (the `local` one), running each op's
forward and backward tile kernels (the same functions the Legate tasks run) on random data of
the tile's input and weight regions, and adding the measured cost of one Legate Python task
(`TASK_OVERHEAD_S`). The result is a `flexflow.cost.Profile`, which overrides the analytic
roofline for every key it holds, so a search on `local` optimizes the times this host has.
GPU devices are left to the analytic model (or to scripts/gpu_check.py's timings).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits

from flexflow.allocator import keep_freed_memory
from flexflow.cost import DEVICE_CONSTANTS, Profile, TaskTime, cost_key
from flexflow.errors import FlexFlowError, MachineError
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import Machine
from flexflow.ops.base import Region, region_shape
from flexflow.ops.init import initialize
from flexflow.space import enumerate_configs

TASK_OVERHEAD_S = DEVICE_CONSTANTS["cpu"].launch_overhead_s
"""What issuing and running one Legate Python task adds to its kernel (measured here: a chain
of copy tasks ran at 110-170 us each; the cost model's 175 us)."""


def _inputs(node: OpNode, region: Region, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for spec, r in zip(node.sig.inputs, node.op.input_regions(node.sig, region), strict=True):
        shape = region_shape(r)
        if spec.dtype.is_float:
            arrays.append(rng.standard_normal(shape).astype(np.float32))
        else:
            arrays.append(np.zeros(shape, dtype=spec.dtype.value))  # valid ids for any table
    return arrays


def _weights(node: OpNode, region: Region, rng: np.random.Generator) -> list[np.ndarray]:
    arrays = []
    for spec, r in zip(node.sig.weights, node.op.weight_regions(node.sig, region), strict=True):
        whole = initialize(spec, rng)
        arrays.append(np.ascontiguousarray(whole[tuple(slice(a, b) for a, b in r)]))
    return arrays


def _median_s(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def measure_tile(node: OpNode, region: Region, repeats: int = 3, seed: int = 0) -> TaskTime:
    """The median time of the op's forward and backward kernels on one tile, plus one task's
    overhead each."""
    rng = np.random.default_rng(seed)
    inputs, weights = _inputs(node, region, rng), _weights(node, region, rng)
    op, sig = node.op, node.sig
    outputs = op.forward_tile(sig, region, inputs, weights)  # also warms both kernels up
    grads = [np.ones_like(o) for o in outputs]
    op.backward_tile(sig, region, inputs, weights, outputs, grads)
    forward = _median_s(lambda: op.forward_tile(sig, region, inputs, weights), repeats)
    backward = _median_s(
        lambda: op.backward_tile(sig, region, inputs, weights, outputs, grads), repeats
    )
    return TaskTime(TASK_OVERHEAD_S + forward, TASK_OVERHEAD_S + backward)


def profile_graph(
    graph: OperatorGraph,
    machine: Machine,
    repeats: int = 3,
    on_op: Callable[[int, int], None] | None = None,
) -> Profile:
    """Measured times of every distinct tile of every op's configurations on the machine's CPU
    devices (`on_op(done, total)` reports progress)."""
    models = {d.model for d in machine.devices if d.kind == "cpu"}
    if not models:
        raise MachineError(
            f"machine '{machine.name}' has no CPU devices to measure; the profiler times tasks "
            f"on this host's CPU processors: use --machine local."
        )
    if repeats < 1:
        raise FlexFlowError(f"profile: repeats must be at least 1, got {repeats}.")
    times: dict = {}
    keep_freed_memory()  # as the Executor does: kernels timed without page faults
    with threadpool_limits(1, user_api="blas"):  # as in a Legate CPU task: one core each
        for done, node in enumerate(graph.ops):
            _profile_op(node, machine, models, repeats, times)
            if on_op is not None:
                on_op(done + 1, len(graph.ops))
    return Profile(times)


def _profile_op(node: OpNode, machine: Machine, models: set[str], repeats: int, times: dict):
    tiles = {}
    for config in enumerate_configs(node.sig, machine):
        region = config.task_regions(node.sig.output_shape)[0]
        tiles.setdefault(region_shape(region), region)
    for shape, region in tiles.items():
        measured = None
        for model in models:
            key = cost_key(node, shape, model)
            if key not in times:
                measured = measured or measure_tile(node, region, repeats)
                times[key] = measured
