"""Measure task times on a GPU: the profile the simulator prices GPU machines' tasks with.

`flexflow.profiler` does this for CPU processors; this is its GPU side, and needs no Legate
(`scripts/gpu_profile.py` runs it on a GPU machine). As the paper's assumption A1 has it, a
task's time depends on its op, its tile's shape and the device model only, so every distinct
output tile of every op's configurations on `machine` is run once through the GPU tiles
(`flexflow.gpu.tiles`: the kernels the op task's GPU variant calls) on data of the tile's
shapes, and its time is stored under each GPU model of the machine (`flexflow.cost.cost_key`).

A tile's time is the wall-clock of one task body, median of `repeats`: its own device context
(scratch memory freed after it, as a task's), the Python issuing its kernels, the kernels and a
synchronization; plus the per-task overhead the analytic model charges a GPU task
(`DEVICE_CONSTANTS["gpu"].launch_overhead_s`, Legion's part). Tiles run one at a time: each task
of a configuration has a GPU of its own. The backward computes input gradients even for an op
reading only model inputs (the GPU tiles always do), so such a first op's backward is an
over-estimate. The optimizer's rate is an SGD update of 256 MiB of weights on the GPU (any model's).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from flexflow.cost import DEVICE_CONSTANTS, UPDATE_BYTES_PER_ELEMENT, Profile, TaskTime, cost_key
from flexflow.errors import MachineError
from flexflow.gpu import tiles, training
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import Machine
from flexflow.ops.base import Region, region_shape
from flexflow.optimizers import SGDOptimizer
from flexflow.profiler import distinct_tiles, median_seconds

TASK_OVERHEAD_S = DEVICE_CONSTANTS["gpu"].launch_overhead_s
"""What Legion adds to a GPU task beyond its body (the analytic model's figure)."""


def gpu_models(machine: Machine) -> list[str]:
    """The machine's GPU models; a MachineError when it has no GPU."""
    models = sorted({d.model for d in machine.devices if d.kind == "gpu"})
    if not models:
        raise MachineError(
            f"machine '{machine.name}' has no GPU devices to measure; the GPU profile times "
            "tasks for a GPU machine: use a GPU preset (e.g. dgx-h200:1) or a machine file "
            "with GPUs."
        )
    return models


Context = Callable[[], Gpu]
"""Makes a task's device context (`Gpu`; the tests' emulated device)."""


def _task(context: Context, body: Callable[[Gpu], object]) -> Callable[[], None]:
    """One task's run of `body`: a device context of its own, closed after a synchronization."""

    def run() -> None:
        with context() as gpu:
            body(gpu)
            gpu.synchronize()

    return run


_BLOCK = np.random.default_rng(0).uniform(-1.0, 1.0, 1 << 16).astype(np.float32)
"""Values for every tile's float data: the kernels' times do not depend on them, and drawing
hundreds of megabytes per tile (or initializing whole weights, as the CPU profiler does) took 6
minutes of host time for the zoo's tiles on this project's host."""


UPDATE_ELEMENTS = 1 << 26
"""The SGD update timed for the profile's rate: 256 MiB of weights, so the rate is the GPU's
streaming rate, not one launch's overhead (`CostModel.update_time` adds that per update)."""


def _filled(
    gpu: Gpu, shape: tuple[int, ...], dtype: str, scale: float = 1.0, ids_below: int = 1
) -> DeviceArray:
    """A device array of `shape`: `_BLOCK`'s values repeated, or for ids 0, 1, .. wrapping at
    `ids_below` (an embedding's rows, so its reads and gradient sums spread as real ids do)."""
    if np.dtype(dtype).kind != "f":
        ids = np.arange(int(np.prod(shape)), dtype=np.int64) % max(ids_below, 1)
        return gpu.to_device(ids.astype(dtype).reshape(shape))
    return gpu.to_device(np.resize(_BLOCK * np.float32(scale), shape))


def measure_tile(
    gpu: Gpu, node: OpNode, region: Region, repeats: int = 5, context: Context = Gpu
) -> TaskTime:
    """(forward, backward) of the op's task computing `region`, on this GPU (see the module)."""
    op, sig = node.op, node.sig
    rows = getattr(op, "num_embeddings", 1)  # ids index an embedding's table; else 0 is safe
    xs = [
        _filled(gpu, region_shape(r), spec.dtype.value, ids_below=rows)
        for spec, r in zip(sig.inputs, op.input_regions(sig, region), strict=True)
    ]
    ws = [  # float32, small, as initialized weights are
        _filled(gpu, region_shape(r), "float32", 0.1) for r in op.weight_regions(sig, region)
    ]
    ys = tiles.forward_tile(gpu, op, sig, region, xs, ws)  # warms up: compiles, picks algorithms
    dys = [_filled(gpu, y.shape, y.dtype) for y in ys]
    tiles.backward_tile(gpu, op, sig, region, xs, ws, ys, dys)
    gpu.synchronize()
    forward = median_seconds(
        [_task(context, lambda g: tiles.forward_tile(g, op, sig, region, xs, ws))], repeats
    )
    backward = median_seconds(
        [_task(context, lambda g: tiles.backward_tile(g, op, sig, region, xs, ws, ys, dys))],
        repeats,
    )
    return TaskTime(TASK_OVERHEAD_S + forward, TASK_OVERHEAD_S + backward)


def measure_update(
    gpu: Gpu, elements: int = UPDATE_ELEMENTS, repeats: int = 5, context: Context = Gpu
) -> float:
    """Bytes per second (`UPDATE_BYTES_PER_ELEMENT` per weight) of an SGD update of `elements`
    float32 weights on this GPU."""
    weight, grad = gpu.zeros((elements,)), gpu.zeros((elements,))
    optimizer = SGDOptimizer(1e-9)
    training.update(gpu, optimizer, weight, grad, [], 1)  # warm-up: compiles the kernel
    gpu.synchronize()
    seconds = median_seconds(
        [_task(context, lambda g: training.update(g, optimizer, weight, grad, [], 1))], repeats
    )
    return UPDATE_BYTES_PER_ELEMENT * elements / max(seconds, 1e-9)


def profile_graph_gpu(
    graph: OperatorGraph,
    machine: Machine,
    repeats: int = 5,
    on_tile: Callable[[int, int], None] | None = None,
    context: Context = Gpu,
    on_failure: Callable[[OpNode, tuple[int, ...], Exception], None] | None = None,
    update_elements: int = UPDATE_ELEMENTS,
) -> Profile:
    """Measured times of every distinct tile of every op's configurations on `machine`, run on
    this process's GPU and keyed by each of the machine's GPU models, and the rate of an SGD
    update of `update_elements` weights (`on_tile(done, total)` reports progress). A tile whose
    kernels raise stops the measurement, unless `on_failure(node, tile shape, error)` is given:
    then it is reported there and left out (the analytic model prices it)."""
    models = gpu_models(machine)
    work: dict[tuple, tuple[OpNode, Region]] = {}  # by cost key without its device model
    for node in graph.ops:
        input_grads = graph.computes_input_grads(node.id)
        for shape, (region, _) in distinct_tiles(node, machine, 1).items():
            work.setdefault(cost_key(node, shape, "", input_grads), (node, region))
    times = {}
    with context() as gpu:
        for done, (key, (node, region)) in enumerate(work.items()):
            try:
                measured = measure_tile(gpu, node, region, repeats, context=context)
            except Exception as error:
                if on_failure is None:
                    raise
                on_failure(node, key[3], error)
            else:
                for model in models:
                    times[key[:-1] + (model,)] = measured
            finally:
                gpu.close()  # this tile's inputs, weights and outputs
            if on_tile is not None:
                on_tile(done + 1, len(work))
        rate = measure_update(gpu, update_elements, repeats, context)
    return Profile(times, dict.fromkeys(models, rate))
