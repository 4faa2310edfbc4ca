"""The GPU variant of the op-tile task: `flexflow.runtime.tasks._run_tile` on device memory.

Legate maps a GPU task's stores to GPU memory and exposes each as an inline allocation with
`__cuda_array_interface__` (pointer, shape, byte strides). This wraps them as `DeviceArray`s,
makes strided ones row-major, runs the kernels of `flexflow.gpu.tiles` / `training` on the
task's CUDA stream (`TaskContext.task_stream`, which Legate synchronizes when the task ends;
without one, the default stream, synchronized here), and writes or adds the results into the
output and reduction stores exactly where the CPU variant does.

This is the only module of flexflow.gpu that touches Legate objects (through `context`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flexflow.gpu import prims, tiles, training
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.gpu.errors import UnsupportedTileError

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def device_array(physical: Any) -> DeviceArray:
    """A task argument (PhysicalArray) as a view of its GPU memory, strides included."""
    return DeviceArray.from_cuda_array(physical.data().get_inline_allocation())


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
    from flexflow.runtime.loss import LOSS_IDS  # the runtime is loaded by the time tasks run
    from flexflow.runtime.tasks import Pass
    from flexflow.task_modes import op_for_task

    which = Pass(which)
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
        for _ in executor.update_groups[op]:
            weight, grad, *old = (next(inputs) for _ in range(2 + states))
            new_weight, new_states = training.update(
                gpu, executor.optimizer, weight, grad, old, extra[0]
            )
            for value in (new_weight, *new_states):
                _write(gpu, next(outputs), value)
        return
    if which == Pass.LOSS:  # this tile's share of the loss, its correct count and gradient
        loss_id, total, valid, key = extra
        prediction = arrays[0]
        if key >= 0:  # the target staged in this process: host to device
            target = gpu.to_device(executor.staged_tile(key, executor.regions(op)[index]))
        else:
            target = arrays[1]
        sums, grad = training.loss_tile(gpu, LOSS_IDS[loss_id], prediction, target, total, valid)
        _write(gpu, context.outputs[0], grad)
        _write(gpu, context.reductions[0], sums, add=True)
        return
    node = executor.graph.ops[op]
    if which == Pass.RUNNING_STATISTICS:  # batch norm's running statistics: (2, C), on the host
        host = [gpu.to_host(a) for a in arrays]
        if extra[0]:  # training: fold this batch's statistics into the running ones
            value = node.op.running_update(node.sig, host[0], host[1])
        else:  # evaluation: normalize with the running statistics
            value = node.op.statistics_from_running(node.sig, host[0])
        _write(gpu, context.outputs[0], gpu.to_device(value))
        return
    region = executor.regions(op)[index]
    n_in, n_w, n_out = len(node.inputs), len(node.weights), len(node.sig.outputs)
    if which in (Pass.FORWARD, Pass.BACKWARD):
        op_now = op_for_task(node.op, tuple(extra))
        if op_now is None:  # dropout outside training (forward passes only): the identity
            _write(gpu, context.outputs[0], arrays[0])
            return
        if op_now is not node.op:
            node = replace(node, op=op_now)
    if which == Pass.STATISTICS_FORWARD:
        stats = tiles.statistics_forward(gpu, node.op, arrays[0])
        _write(gpu, context.reductions[0], stats, add=True)
        return
    inputs, weights = arrays[:n_in], arrays[n_in : n_in + n_w]
    rest = arrays[n_in + n_w :]
    if which == Pass.FORWARD:
        if node.op.statistics_dims:
            outputs = tiles.forward_tile_with_statistics(
                gpu, node.op, node.sig, inputs[0], weights, rest[0]
            )
        else:
            outputs = tiles.forward_tile(gpu, node.op, node.sig, region, inputs, weights)
        for target, value in zip(context.outputs, outputs, strict=True):
            _write(gpu, target, value)
        return
    outputs, grad_outputs, stats = rest[:n_out], rest[n_out : 2 * n_out], rest[2 * n_out :]
    if which not in (Pass.BACKWARD, Pass.STATISTICS_BACKWARD):
        raise UnsupportedTileError(
            f"{node.op.kind}: pass {which.name} has no GPU variant; add it to "
            "flexflow.gpu.variant.run_tile_gpu next to the CPU task body's."
        )
    if which == Pass.STATISTICS_BACKWARD:
        partial = tiles.statistics_backward(
            gpu, node.op, node.sig, inputs[0], weights, outputs[0], grad_outputs[0], stats[0]
        )
        _write(gpu, context.reductions[0], partial, add=True)
        return
    if node.op.statistics_dims:
        grad_inputs, grad_weights = tiles.backward_tile_with_statistics(
            gpu,
            node.op,
            node.sig,
            inputs[0],
            weights,
            outputs[0],
            grad_outputs[0],
            stats[0],
            stats[1],
        )
    else:
        grad_inputs, grad_weights = tiles.backward_tile(
            gpu, node.op, node.sig, region, inputs, weights, outputs, grad_outputs
        )
    reductions = iter(context.reductions)
    for grad, spec in zip(grad_inputs, node.sig.inputs, strict=True):
        if spec.dtype.is_float:
            _write(gpu, next(reductions), grad, add=True)
    for grad in grad_weights:
        _write(gpu, next(reductions), grad, add=True)
