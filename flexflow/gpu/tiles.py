"""The GPU kernels of every op kind, as one table: forward and backward tiles dispatched by `op.kind`.

Each entry computes exactly what the numpy reference's `forward_tile` / `backward_tile` computes
(same inputs, weights and outputs, in order and shape) on row-major device arrays, and names the
libraries it needs. Batch norm's shared-statistics functions are exported next to the table.
A test fails when an op kind of `flexflow.ops.OP_KINDS` has no entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flexflow.gpu import tile_elementwise as elementwise
from flexflow.gpu import tile_linear as linear
from flexflow.gpu import tile_norm as norm
from flexflow.gpu import tile_shape as shape
from flexflow.gpu import tile_window as window
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.gpu.errors import UnsupportedTileError
from flexflow.ops import OP_KINDS, Op, Region, Signature

ForwardTile = Callable[..., tuple[DeviceArray, ...]]
"""forward(gpu, op, sig, region, inputs, weights) -> outputs"""
BackwardTile = Callable[..., tuple[tuple[DeviceArray | None, ...], tuple[DeviceArray, ...]]]
"""backward(gpu, op, sig, region, inputs, weights, outputs, grad_outputs) -> (d inputs, d weights)"""

NVRTC = ("nvrtc", "driver")
CUBLAS = NVRTC + ("cublas",)
CUDNN = NVRTC + ("cudnn",)


@dataclass(frozen=True, slots=True)
class GpuTile:
    """An op kind's GPU forward and backward tiles and the CUDA libraries they call."""

    forward: ForwardTile
    backward: BackwardTile
    libraries: tuple[str, ...]


GPU_TILES: dict[str, GpuTile] = {
    "batch_matmul": GpuTile(linear.batch_matmul_forward, linear.batch_matmul_backward, CUBLAS),
    "batch_norm": GpuTile(norm.batch_norm_forward, norm.batch_norm_backward, NVRTC),
    "concat": GpuTile(shape.concat_forward, shape.concat_backward, NVRTC),
    "conv2d": GpuTile(window.conv2d_forward, window.conv2d_backward, CUDNN),
    "dense": GpuTile(linear.dense_forward, linear.dense_backward, CUBLAS),
    "dropout": GpuTile(elementwise.dropout_forward, elementwise.dropout_backward, NVRTC),
    "element_binary": GpuTile(elementwise.binary_forward, elementwise.binary_backward, NVRTC),
    "element_unary": GpuTile(elementwise.unary_forward, elementwise.unary_backward, NVRTC),
    "embedding": GpuTile(elementwise.embedding_forward, elementwise.embedding_backward, NVRTC),
    "flat": GpuTile(shape.flat_forward, shape.flat_backward, NVRTC),
    "gather": GpuTile(elementwise.gather_forward, elementwise.gather_backward, NVRTC),
    "layer_norm": GpuTile(norm.layer_norm_forward, norm.layer_norm_backward, NVRTC),
    "lstm": GpuTile(linear.lstm_forward, linear.lstm_backward, CUBLAS),
    "mean": GpuTile(norm.mean_forward, norm.mean_backward, NVRTC),
    "multihead_attention": GpuTile(
        linear.attention_forward, linear.attention_backward, CUBLAS + ("cudnn",)
    ),
    "pool2d": GpuTile(window.pool2d_forward, window.pool2d_backward, CUDNN),
    "reduce_sum": GpuTile(norm.reduce_sum_forward, norm.reduce_sum_backward, NVRTC),
    "reshape": GpuTile(shape.reshape_forward, shape.reshape_backward, NVRTC),
    "softmax": GpuTile(norm.softmax_forward, norm.softmax_backward, CUDNN),
    "split": GpuTile(shape.split_forward, shape.split_backward, NVRTC),
    "stack": GpuTile(shape.stack_forward, shape.stack_backward, NVRTC),
    "transpose": GpuTile(shape.transpose_forward, shape.transpose_backward, NVRTC),
}

# batch norm's tiles that share batch statistics (see flexflow.ops.batch_norm)
statistics_forward = norm.statistics_forward
forward_tile_with_statistics = norm.forward_tile_with_statistics
statistics_backward = norm.statistics_backward
backward_tile_with_statistics = norm.backward_tile_with_statistics


def missing_kinds() -> list[str]:
    """Registered op kinds without GPU tiles (the test keeps this empty)."""
    return sorted(set(OP_KINDS) - set(GPU_TILES))


def gpu_tile(op: Op) -> GpuTile:
    try:
        return GPU_TILES[op.kind]
    except KeyError:
        raise UnsupportedTileError(
            f"{op.kind}: no GPU kernels are registered for this op kind; add its forward and "
            "backward tiles to flexflow.gpu.tiles.GPU_TILES, or run it on CPU processors."
        ) from None


def forward_tile(
    gpu: Gpu,
    op: Op,
    sig: Signature,
    region: Region,
    inputs: Sequence[DeviceArray],
    weights: Sequence[DeviceArray],
) -> tuple[DeviceArray, ...]:
    """The outputs of the task computing output tile `region` (GPU `Op.forward_tile`)."""
    return gpu_tile(op).forward(gpu, op, sig, region, tuple(inputs), tuple(weights))


def backward_tile(
    gpu: Gpu,
    op: Op,
    sig: Signature,
    region: Region,
    inputs: Sequence[DeviceArray],
    weights: Sequence[DeviceArray],
    outputs: Sequence[DeviceArray],
    grad_outputs: Sequence[DeviceArray],
) -> tuple[tuple[DeviceArray | None, ...], tuple[DeviceArray, ...]]:
    """The gradients the task of tile `region` contributes (GPU `Op.backward_tile`)."""
    return gpu_tile(op).backward(
        gpu, op, sig, region, tuple(inputs), tuple(weights), tuple(outputs), tuple(grad_outputs)
    )
