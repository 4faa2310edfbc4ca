"""The GPU variant of the op-tile task (`flexflow.runtime.tasks`): its bodies on device memory.

Legate maps a GPU task's stores to GPU memory and exposes each as an inline allocation with
`__cuda_array_interface__` (pointer, shape, byte strides). This wraps them as `DeviceArray`s,
makes strided ones row-major, runs the kernels of `flexflow.gpu.tiles` / `training` on the
task's CUDA stream (`TaskContext.task_stream`, which Legate synchronizes when the task ends;
without one, the default stream, synchronized here), and writes or adds the results into the
output and reduction stores exactly where the CPU variant does.

This is the only module of flexflow.gpu that touches Legate objects (through `context`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from flexflow.gpu import prims, tiles, training
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.gpu.errors import UnsupportedTileError

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def device_array(physical: Any) -> DeviceArray:
    """A task argument (PhysicalArray) as a view of its GPU memory, strides included."""
    return DeviceArray.from_cuda_array(physical.data().get_inline_allocation())


def _summed_rows(gpu: Gpu, rows: DeviceArray) -> DeviceArray:
    """A batch norm's statistics from its tasks' rows (flexflow.runtime.batch_statistics),
    summed in row order on the host (a few channels' float64 sums)."""
    return gpu.to_device(gpu.to_host(rows).sum(axis=0))


def _write(gpu: Gpu, physical: Any, value: DeviceArray, add: bool = False) -> None:
    """store[...] = value (outputs) or store[...] += value (reductions), through its strides."""
    target = device_array(physical)
    if value.dtype != target.dtype or value.size != target.size:
        raise UnsupportedTileError(
            f"GPU tile result {value.shape} {value.dtype} does not fit its store {target.shape} "
            f"{target.dtype}; the GPU kernel and the CPU reference disagree on this output."
        )
    if value.shape != target.shape:
        value = prims.contiguous(gpu, value).reshape(target.shape)
    prims.copy(gpu, target, value, add=add)


def run_tile_gpu(context: Any, executor: Executor, which: int, op: int, index: int, extra) -> None:
    """One task of pass `which` on op (or parameter) `op`, tile `index`, on this task's GPU."""
    stream = context.task_stream
    with Gpu(stream or 0) as gpu:
        _run(gpu, context, executor, which, op, index, tuple(extra))
        if stream is None:  # Legate waits for its task stream; the default stream we wait for
            gpu.synchronize()


def _run(
    gpu: Gpu, context: Any, executor: Executor, which: int, op: int, index: int, extra
) -> None:
    from flexflow.fused_run import summed_parts
    from flexflow.runtime.passes import FUSED_PASSES, Pass

    which = Pass(which)
    if which in FUSED_PASSES:
        _run_fused(gpu, context, executor, which, op, index, extra)
        return
    if which == Pass.FLAT_UPDATE:  # flat copies of the weights live on CPUs only
        raise AssertionError("a flat update task on a GPU (flexflow.fusion.updates_in_step)")
    if which == Pass.FEED:  # one shard of a model input, copied in on the device that reads it
        if extra:  # the batch staged in this process: host to device
            shard = executor.staged_tile(extra[0], executor.input_shard(op, index))
            _write(gpu, context.outputs[0], gpu.to_device(shard))
        else:
            _write(gpu, context.outputs[0], prims.contiguous(gpu, device_array(context.inputs[0])))
        return
    arrays = [prims.contiguous(gpu, device_array(a)) for a in context.inputs]
    if which == Pass.UPDATE:  # this device's weight tiles and their optimizer states, in place
        inputs, outputs = iter(arrays), iter(context.outputs)
        states = len(executor.optimizer.state_names)
        for pid, _ in executor.update_groups[op]:
            weight = next(inputs)
            # the devices' partial gradients, one (1, ...) row each, summed in device order
            grad = prims.reduce_sum(gpu, next(inputs), (0,))
            for _ in executor.contributors[pid][1:]:
                prims.reduce_sum(gpu, next(inputs), (0,), out=grad, add=True)
            old = [next(inputs) for _ in range(states)]
            l2 = executor.graph.parameters[pid].l2  # its L2 regularizer's lambda
            new_weight, new_states = training.update(
                gpu, executor.optimizer, weight, grad, old, extra[0], l2
            )
            for value in (new_weight, *new_states):
                _write(gpu, next(outputs), value)
        return
    if which == Pass.LOSS:  # this tile's share of the loss, its correct count and gradient
        stored = arrays[1] if len(arrays) > 1 else None
        _loss_into(
            gpu, executor, op, index, extra, arrays[0], stored,
            context.outputs[0], context.outputs[1],
        )  # fmt: skip
        return
    node = executor.graph.ops[op]
    if which == Pass.RUNNING_STATISTICS:  # batch norm's running statistics: (2, C), on the host
        host = [gpu.to_host(a) for a in arrays]
        if extra[0]:  # training: fold this batch's statistics (the tasks' rows) into them
            value = node.op.running_update(node.sig, host[0].sum(axis=0), host[1])
        else:  # evaluation: the statistics' first row from the running ones, the others 0
            value = np.zeros(device_array(context.outputs[0]).shape)
            value[0] = node.op.statistics_from_running(node.sig, host[0])
        _write(gpu, context.outputs[0], gpu.to_device(value))
        return
    # the forward and backward passes of an op with batch statistics (batch norm), which never
    # joins a fused group; every other op runs in `_run_fused`
    n_in, n_w, n_out = len(node.inputs), len(node.weights), len(node.sig.outputs)
    if which in (Pass.BACKWARD, Pass.STATISTICS_BACKWARD):  # its gradients' parts, summed
        add = _GpuTiles(gpu).accumulate
        arrays = summed_parts(arrays, executor.gradients.alone_read_counts(op, index), add)
    if which == Pass.STATISTICS_FORWARD:  # this task's row of the statistics
        stats = tiles.statistics_forward(gpu, node.op, arrays[0])
        _write(gpu, context.outputs[0], stats)
        return
    inputs, weights = arrays[:n_in], arrays[n_in : n_in + n_w]
    rest = arrays[n_in + n_w :]
    if which == Pass.FORWARD:  # (the statistics: every task's row of this tile's channels)
        outputs = tiles.forward_tile_with_statistics(
            gpu, node.op, node.sig, inputs[0], weights, _summed_rows(gpu, rest[0])
        )
        for target, value in zip(context.outputs, outputs, strict=True):
            _write(gpu, target, value)
        return
    outputs, grad_outputs, stats = rest[:n_out], rest[n_out : 2 * n_out], rest[2 * n_out :]
    if which not in (Pass.BACKWARD, Pass.STATISTICS_BACKWARD):
        raise UnsupportedTileError(
            f"{node.op.kind}: pass {which.name} has no GPU variant; add it to "
            "flexflow.gpu.variant.run_tile_gpu next to the CPU task body's."
        )
    summed = [_summed_rows(gpu, rows) for rows in stats[:2]]  # (forward, backward)
    if which == Pass.STATISTICS_BACKWARD:  # this task's row of the backward's statistics
        partial = tiles.statistics_backward(
            gpu, node.op, node.sig, inputs[0], weights, outputs[0], grad_outputs[0], summed[0]
        )
        _write(gpu, context.outputs[0], partial)
        return
    grad_inputs, grad_weights = tiles.backward_tile_with_statistics(
        gpu, node.op, node.sig, inputs[0], weights, outputs[0], grad_outputs[0], *summed
    )
    reductions = iter(context.reductions)
    for grad, spec in zip(grad_inputs, node.sig.inputs, strict=True):
        if spec.dtype.is_float:
            _write(gpu, next(reductions), grad, add=True)
    # this device's partial weight gradients: read after the statistics, written as outputs
    backend = _GpuTiles(gpu)
    for grad, current, target in zip(grad_weights, stats[2:], context.outputs, strict=True):
        _write(gpu, target, backend.accumulate(current, grad))


def _loss_into(
    gpu: Gpu, executor: Executor, op: int, index: int, loss_args, prediction, stored, grad, sums
) -> DeviceArray:
    """The CPU body's `loss_into` (flexflow.runtime.unfused_body) on the device: the gradient
    (returned, and written into `grad` unless None), (loss, correct) into `sums`, this task's
    row (task arguments)."""
    from flexflow.runtime.loss import LOSS_IDS

    loss_id, total, valid, key = loss_args
    if key >= 0:  # the target staged in this process: host to device
        target = gpu.to_device(executor.staged_tile(key, executor.regions(op)[index]))
    else:
        target = stored
    values, gradient = training.loss_tile(gpu, LOSS_IDS[loss_id], prediction, target, total, valid)
    if grad is not None:
        _write(gpu, grad, gradient)
    _write(gpu, sums, values)
    return gradient


_NO_WINDOWS = (
    "a GPU task read part of a tile made in its fused task; flexflow.fusion fuses such reads "
    "on CPUs only (a bug if seen)."
)


class _GpuTiles:
    """The GPU variant's side of a fused task (flexflow.fused_run.TileBackend)."""

    def __init__(self, gpu: Gpu) -> None:
        self.gpu = gpu

    def forward(self, op, sig, region, inputs, weights):
        return tiles.forward_tile(self.gpu, op, sig, region, inputs, weights)

    def forward_saving(self, op, sig, region, inputs, weights):
        return self.forward(op, sig, region, inputs, weights), None  # the GPU tiles keep none

    def backward(
        self, op, sig, region, inputs, weights, outputs, grads, need_input_grads, into, saved=None
    ):
        # the GPU tiles always compute the input gradients (need_input_grads only saves work)
        # and their weight gradients anew (`into` only saves a copy; `saved` is always None)
        return tiles.backward_tile(self.gpu, op, sig, region, inputs, weights, outputs, grads)

    def forward_with_statistics(self, *_):
        raise AssertionError("batch norm runs alone on GPUs (flexflow.fusion.shared_statistics)")

    def write(self, target: Any, value: DeviceArray) -> None:
        _write(self.gpu, target, value)

    def add(self, target: Any, value: DeviceArray) -> None:
        _write(self.gpu, target, value, add=True)

    def accumulate(self, total: DeviceArray, value: DeviceArray) -> DeviceArray:
        """total + value; a partial gradient's leading device axis is ignored (same size)."""
        return prims.binary(self.gpu, "add", total, value.reshape(total.shape))

    def window(self, value: DeviceArray, where) -> DeviceArray:
        raise UnsupportedTileError(_NO_WINDOWS)

    def add_window(self, total: DeviceArray, where, value: DeviceArray) -> None:
        raise UnsupportedTileError(_NO_WINDOWS)

    def zeros_like(self, value: DeviceArray) -> DeviceArray:
        return self.gpu.zeros(value.shape, str(np.dtype(value.dtype)))

    def hold(self, value: DeviceArray, dtype: str) -> DeviceArray:
        if np.dtype(value.dtype) != np.dtype(dtype):
            raise UnsupportedTileError(
                f"GPU tile result {value.shape} {value.dtype} is not the {dtype} its tensor "
                "holds; the GPU kernel and the CPU reference disagree on this output."
            )
        return value


def _run_fused(
    gpu: Gpu, context: Any, executor: Executor, which: int, group: int, index: int, extra
) -> None:
    """A fused task on device arrays (flexflow.fused_run.run_fused_task)."""
    from flexflow.fused_run import run_fused_task
    from flexflow.runtime.passes import FUSED_PASSES, Pass

    def read_back(physical: Any) -> DeviceArray:
        return prims.contiguous(gpu, device_array(physical))

    def loss_into(op, index, loss_args, prediction, stored, grad, sums) -> DeviceArray:
        return _loss_into(gpu, executor, op, index, loss_args, prediction, stored, grad, sums)

    inputs = [read_back(a) for a in context.inputs]
    run_fused_task(
        executor.fused_tasks[group][index], _GpuTiles(gpu), FUSED_PASSES[Pass(which)],
        (inputs, context.outputs, context.reductions), tuple(extra), executor.timeline_entries,
        (Pass.FORWARD, Pass.LOSS, Pass.BACKWARD), read_back, loss_into,
        executor.gradients.read_counts(group, index) if which == Pass.FUSED_BACKWARD else (),
    )  # fmt: skip
