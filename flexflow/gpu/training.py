"""GPU optimizer updates and losses for the runtime's UPDATE and LOSS tasks.

`update` computes `flexflow.optimizers`' `Optimizer.update` on one weight tile (float32, in the
reference's order of operations, so bit-identical to it; with the parameter's L2 regularizer
`l2`, added to the summed gradient first, `flexflow.regularizers`); `loss_tile` computes
`flexflow.runtime.loss.loss_tile`: the tile's loss share and correct-prediction count (as a
float64 pair the task adds into its reduction) and the gradient tile.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flexflow.errors import FlexFlowError, ShapeError
from flexflow.gpu.device import DeviceArray, Gpu, require_contiguous
from flexflow.gpu.nvrtc import Arg, grid_for, launch
from flexflow.gpu.sources_nn import TRAINING
from flexflow.optimizers import AdamOptimizer, SGDOptimizer

_F32 = np.float32


def _f32(value: float) -> object:
    return Arg.f32(float(_F32(value)))  # the float32 the reference computes with


def sgd_update(gpu: Gpu, optimizer: SGDOptimizer, weight, grad, states, step: int, l2: float):
    require_contiguous("sgd update", weight, grad, *states)
    new_weight = gpu.empty(weight.shape)
    velocity = gpu.empty(weight.shape) if optimizer.momentum else None
    if weight.size:
        launch(
            gpu, TRAINING, "sgd_update", grid_for(weight.size),
            [Arg.ptr(new_weight.ptr), Arg.ptr(velocity.ptr if velocity else 0),
             Arg.ptr(weight.ptr), Arg.ptr(grad.ptr), Arg.ptr(states[0].ptr if velocity else 0),
             Arg.i64(weight.size), _f32(optimizer.learning_rate), _f32(optimizer.momentum),
             _f32(optimizer.weight_decay), Arg.i64(int(optimizer.nesterov)), _f32(l2)],
        )  # fmt: skip
    return new_weight, ((velocity,) if velocity else ())


def adam_update(gpu: Gpu, optimizer: AdamOptimizer, weight, grad, states, step: int, l2: float):
    require_contiguous("adam update", weight, grad, *states)
    new_weight, m, v = (gpu.empty(weight.shape) for _ in range(3))
    b1, b2 = _F32(optimizer.beta1), _F32(optimizer.beta2)
    if weight.size:
        launch(
            gpu, TRAINING, "adam_update", grid_for(weight.size),
            [Arg.ptr(new_weight.ptr), Arg.ptr(m.ptr), Arg.ptr(v.ptr), Arg.ptr(weight.ptr),
             Arg.ptr(grad.ptr), Arg.ptr(states[0].ptr), Arg.ptr(states[1].ptr),
             Arg.i64(weight.size), _f32(optimizer.learning_rate), _f32(b1), _f32(b2),
             _f32(_F32(1) - b1), _f32(_F32(1) - b2), _f32(1 - optimizer.beta1**step),
             _f32(1 - optimizer.beta2**step), _f32(optimizer.epsilon),
             _f32(optimizer.weight_decay), _f32(l2)],
        )  # fmt: skip
    return new_weight, (m, v)


UPDATES = {SGDOptimizer: sgd_update, AdamOptimizer: adam_update}


def update(
    gpu: Gpu,
    optimizer,
    weight: DeviceArray,
    grad: DeviceArray,
    states: Sequence[DeviceArray],
    step: int,
    l2: float = 0.0,
) -> tuple[DeviceArray, tuple[DeviceArray, ...]]:
    """The new weight tile and state tiles after update number `step` (GPU `Optimizer.update`,
    the parameter's L2 lambda `l2` included)."""
    kernel = UPDATES.get(type(optimizer))
    if kernel is None:
        raise FlexFlowError(
            f"{type(optimizer).__name__}: no GPU update kernel; add one to "
            "flexflow.gpu.training.UPDATES or train on CPU processors."
        )
    return kernel(gpu, optimizer, weight, grad, tuple(states), step, l2)


# ---- losses -------------------------------------------------------------------------------------
_TARGET_SUFFIX = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}


def _dense_loss(gpu: Gpu, name: str, prediction, target, sums, grad, rows, valid, total) -> None:
    if target.shape != prediction.shape or not target.dtype.startswith("float"):
        raise ShapeError(
            f"{name} on GPU: target {target.shape} {target.dtype} must be a float tensor shaped "
            f"like the output tile {prediction.shape}; pass one target per output element."
        )
    classes = prediction.size // rows
    args = [Arg.ptr(sums.ptr), Arg.ptr(grad.ptr), Arg.ptr(prediction.ptr), Arg.ptr(target.ptr),
            Arg.i64(rows), Arg.i64(classes), Arg.i64(valid), Arg.f64(total)]  # fmt: skip
    kernel = "mse" if name == "mean_squared_error" else "cce"
    if kernel == "mse":
        args.append(Arg.i64(int(prediction.ndim >= 2)))  # the reference counts only then
    launch(
        gpu, TRAINING, f"{kernel}_{_TARGET_SUFFIX[target.dtype]}", grid_for(prediction.size), args
    )


def _sparse_loss(gpu: Gpu, prediction, labels, sums, grad, rows, valid, total) -> None:
    if prediction.ndim != 2 or labels.size != rows or labels.dtype not in ("int32", "int64"):
        raise ShapeError(
            f"sparse_categorical_crossentropy on GPU: expects (sample, classes) probabilities "
            f"and one integer label per sample, got {prediction.shape} and labels "
            f"{labels.shape} {labels.dtype}."
        )
    bad = gpu.zeros((1,), "int32")
    launch(
        gpu, TRAINING, f"sparse_cce_{_TARGET_SUFFIX[labels.dtype]}", grid_for(max(valid, 1)),
        [Arg.ptr(sums.ptr), Arg.ptr(grad.ptr), Arg.ptr(bad.ptr), Arg.ptr(prediction.ptr),
         Arg.ptr(labels.ptr), Arg.i64(rows), Arg.i64(prediction.shape[1]), Arg.i64(valid),
         Arg.f64(total)],
    )  # fmt: skip
    if gpu.to_host(bad)[0]:
        raise ShapeError(
            f"sparse_categorical_crossentropy on GPU: labels must lie in "
            f"[0, {prediction.shape[1]}); remap the labels of this batch."
        )


def _identity_loss(gpu: Gpu, prediction, sums, grad, rows, valid, total) -> None:
    per_row = prediction.size // rows
    launch(
        gpu, TRAINING, "identity_loss", grid_for(prediction.size),
        [Arg.ptr(sums.ptr), Arg.ptr(grad.ptr), Arg.ptr(prediction.ptr), Arg.i64(rows),
         Arg.i64(per_row), Arg.i64(valid), Arg.f64(total)],
    )  # fmt: skip


LOSS_NAMES = (
    "mean_squared_error",
    "sparse_categorical_crossentropy",
    "categorical_crossentropy",
    "identity",
)


def loss_tile(
    gpu: Gpu, name: str, prediction: DeviceArray, target: DeviceArray, total: int, valid: int
) -> tuple[DeviceArray, DeviceArray]:
    """(sums, grad): sums (2,) float64 = this tile's loss share (over its first `valid` samples,
    divided by `total`) and its correct predictions; grad = the loss gradient (zero past `valid`)."""
    if name not in LOSS_NAMES:
        raise ShapeError(f"unknown loss '{name}' on GPU; choose one of {', '.join(LOSS_NAMES)}.")
    require_contiguous(name, prediction, None if name == "identity" else target)
    rows = prediction.shape[0] if prediction.ndim else 0
    valid = max(0, min(valid, rows))
    sums = gpu.zeros((2,), "float64")
    grad = gpu.zeros(prediction.shape)
    if valid == 0 or prediction.size == 0:
        return sums, grad
    shape = prediction.shape
    if name == "identity":  # any rank: the labels are not read
        _identity_loss(gpu, prediction, sums, grad, rows, valid, total)
        return sums, grad
    if prediction.ndim > 2:  # one prediction per position: rows of classes, as the CPU counts
        positions = prediction.size // (rows * shape[-1])
        prediction, grad = prediction.reshape((-1, shape[-1])), grad.reshape((-1, shape[-1]))
        if name != "sparse_categorical_crossentropy":
            target = target.reshape(prediction.shape)
        rows, valid = rows * positions, valid * positions
    if name == "sparse_categorical_crossentropy":
        _sparse_loss(gpu, prediction, target.reshape((-1,)), sums, grad, rows, valid, total)
    else:
        _dense_loss(gpu, name, prediction, target, sums, grad, rows, valid, total)
    return sums, grad.reshape(shape)
