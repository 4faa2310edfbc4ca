"""Batch normalization (training mode, fused ReLU): sample and parameter dims (paper Table 1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from . import native_norms
from .base import (
    Arrays,
    Dim,
    DimKind,
    GradientsInto,
    Op,
    Region,
    Signature,
    TensorSpec,
    WeightSpec,
    region_volume,
)
from .checks import expect_float, expect_inputs, expect_positive_real
from .registry import register

_FORWARD_FLOPS_PER_ELEMENT = 7
"""Mean (1 add), variance (subtract, square, add), normalize (2), gamma * xhat + beta (2)."""

_BACKWARD_FLOPS_PER_ELEMENT = 11
"""dgamma (2), dbeta (1), dxhat (1), dx through the batch statistics (2 sums + 4 element ops)."""


RUNNING_MOMENTUM = 0.1
"""How much of each training batch's statistics the running ones take (PyTorch's default)."""


@register
@dataclass(frozen=True, slots=True)
class BatchNorm(GradientsInto, Op):
    """x (N, C, H, W) or (N, C) -> same shape: relu(gamma * (x - mean) / sqrt(var + eps) + beta).

    Statistics are per channel over every other axis (biased variance), as in training. A channel
    (parameter) split is independent per tile and reads only its gamma and beta. A sample split
    is not: each tile's statistics span the whole batch, so the tasks sharing a channel range
    all-reduce their per-channel sums and sums of squares before normalizing (and the matching
    two sums of the backward pass). `input_regions` names only the tile's own slice, which is
    what moves; `statistics_dims` declares the all-reduce.
    """

    kind = "batch_norm"
    training_mode = True
    statistics_dims = ("sample",)
    relu: bool = True
    eps: float = 1e-5

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        expect_positive_real(self.kind, name, eps=self.eps)
        if not isinstance(self.relu, bool):  # "yes" or 0 was kept, read by truth
            raise ShapeError(f"batch_norm '{name}': relu must be True or False, got {self.relu!r}.")
        if len(x.shape) not in (2, 4):
            raise ShapeError(
                f"batch_norm '{name}': input must have rank 4 (sample, channel, height, width) or "
                f"rank 2 (sample, channel), got shape {x.shape}; reshape it to NCHW or flatten it."
            )
        channels = x.shape[1]
        weights = (
            WeightSpec("gamma", (channels,), "ones"),
            WeightSpec("beta", (channels,), "zeros"),
        )
        dims = (Dim("sample", DimKind.SAMPLE), Dim("channel", DimKind.PARAMETER))
        if len(x.shape) == 4:
            dims += (Dim("height"), Dim("width"))  # statistics span H and W: not partitionable
        return Signature((x,), (x,), weights, dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        shape = sig.inputs[0].shape
        # the tile's samples and channels, every pixel (H and W are never split)
        return ((region[0], region[1]) + tuple((0, s) for s in shape[2:]),)

    def statistics_elements(self, sig: Signature, region: Region) -> int:
        return 2 * (region[1][1] - region[1][0])  # a sum and a sum of squares per channel

    def weight_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        return ((region[1],), (region[1],))  # gamma and beta of the tile's channels

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        elements = region_volume(region)
        relu = elements if self.relu else 0
        return (
            float(_FORWARD_FLOPS_PER_ELEMENT * elements + relu),
            float(_BACKWARD_FLOPS_PER_ELEMENT * elements + relu),
        )

    # ---- numpy reference ------------------------------------------------------------------------
    def _normalize(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
        """xhat (same shape as x), 1/sqrt(var + eps) broadcastable to x, and the reduced axes."""
        axes = (0,) + tuple(range(2, x.ndim))  # every axis but the channel
        mean = x.mean(axis=axes, keepdims=True)  # (1, C, 1, 1)
        var = x.var(axis=axes, keepdims=True)  # biased, as in training
        inv_std = 1.0 / np.sqrt(var + self.eps)
        return (x - mean) * inv_std, inv_std, axes

    @staticmethod
    def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
        return v.reshape((1, -1) + (1,) * (ndim - 2))  # (C,) -> (1, C, 1, 1)

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        gamma, beta = (self._per_channel(w, x.ndim) for w in weights)
        xhat, _, _ = self._normalize(x)
        z = gamma * xhat + beta
        return (np.maximum(z, 0) if self.relu else z,)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        (y,) = outputs
        dz = grad_outputs[0] * (y > 0) if self.relu else grad_outputs[0]
        xhat, inv_std, axes = self._normalize(x)
        count = x.size // x.shape[1]  # elements per channel, M
        grad_gamma = (dz * xhat).sum(axis=axes)
        grad_beta = dz.sum(axis=axes)
        dxhat = dz * self._per_channel(weights[0], x.ndim)
        # dx = (M dxhat - sum(dxhat) - xhat sum(dxhat xhat)) / (M sqrt(var + eps))
        sum_dxhat = dxhat.sum(axis=axes, keepdims=True)
        sum_dxhat_xhat = (dxhat * xhat).sum(axis=axes, keepdims=True)
        dx = (count * dxhat - sum_dxhat - xhat * sum_dxhat_xhat) * (inv_std / count)
        return (dx,), (grad_gamma, grad_beta)

    # ---- tiles that share batch statistics (a sample split) ----------------------------------
    # Each tile contributes per-channel partial sums; the sums of all tiles sharing its channels
    # (added by the runtime's reduction) give the batch statistics the tile normalizes with.

    def batch_count(self, sig: Signature) -> int:
        """Elements per channel in the whole batch, which the statistics span."""
        shape = sig.inputs[0].shape
        return shape[0] * int(np.prod(shape[2:], dtype=np.int64))  # elements per channel, M

    # ---- a tile normalized with its own statistics ---------------------------------------------
    # The batch's statistics where the tile holds every sample (one device, a channel split):
    # what a fused task runs there (flexflow.fusion.shared_statistics), and what the profiler
    # times for any tile (a sample tile's share of the work; the all-reduce is priced apart).

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        return self.forward_tile_saving(sig, region, inputs, weights)[0]

    def forward_tile_saving(self, sig, region, inputs, weights) -> tuple[Arrays, np.ndarray]:
        """The tile normalized with its own statistics, which its backward reuses."""
        (x,) = inputs
        stats = self.statistics_forward(x)
        return self.forward_tile_with_statistics(sig, x, weights, stats, _tile_count(x)), stats

    def backward_tile_into(
        self, sig, region, inputs, weights, outputs, grad_outputs, need_input_grads,
        weight_grads_into, saved=None,
    ):  # fmt: skip
        (x,), (y,), (dy,) = inputs, outputs, grad_outputs
        count = _tile_count(x)
        stats = self.statistics_forward(x) if saved is None else saved
        grad_stats = self.statistics_backward(sig, x, weights, y, dy, stats, count)
        return self.backward_tile_with_statistics(
            sig, x, weights, y, dy, stats, grad_stats, count, tile_sums=grad_stats
        )

    def train_forward_tile(
        self, sig, x, weights, running, running_out, exchange=None, point: int = 0
    ) -> tuple[Arrays, np.ndarray]:
        """A float32 training tile in a fused task, as one C call without the interpreter lock
        (native/exchange.c): its outputs normalized with the batch's statistics (the tile's
        own, or with `exchange`, a cffi exchange pointer, summed over the points of a
        concurrent launch as point `point`), the running statistics after it written to
        `running_out`; and those statistics, which its backward takes."""
        y, stats = native_norms.bn_train_forward(
            x, *weights, running, running_out, self.batch_count(sig), self.eps, self.relu,
            RUNNING_MOMENTUM, exchange, point,
        )  # fmt: skip
        return (y,), stats

    def train_backward_tile(self, sig, x, weights, y, dy, stats, exchange=None, point: int = 0):
        """The backward of `train_forward_tile`'s tile from its statistics: (dx,), (its
        partial gamma and beta gradients)."""
        dx, dgamma, dbeta = native_norms.bn_train_backward(
            x, y, dy, weights[0], stats, self.batch_count(sig), self.eps, self.relu, exchange, point
        )
        return (dx,), (dgamma, dbeta)

    def running_update(
        self,
        sig: Signature,
        stats: np.ndarray,
        running: np.ndarray,
        momentum: float = RUNNING_MOMENTUM,
    ) -> np.ndarray:
        """(2, C) running mean and variance after a training batch whose per-channel sums are
        `stats` (PyTorch's rule: the unbiased batch variance, momentum 0.1)."""
        count = self.batch_count(sig)
        mean = stats[0] / count
        var = np.maximum(stats[1] / count - mean * mean, 0.0) * (count / max(count - 1, 1))
        return (1.0 - momentum) * running + momentum * np.stack([mean, var])

    def statistics_from_running(self, sig: Signature, running: np.ndarray) -> np.ndarray:
        """The (2, C) sums a batch with the running mean and variance would have: what an
        evaluation normalizes with instead of the batch's own statistics."""
        count = self.batch_count(sig)
        mean, var = running
        return np.stack([mean * count, (var + mean * mean) * count])

    # The tiles run C kernels on float32 (one pass each, no float64 copies of the tile); the
    # numpy_ methods are their reference, and what other dtypes run.
    def statistics_forward(self, x: np.ndarray) -> np.ndarray:
        """(2, C_t): this tile's per-channel sum and sum of squares (float64)."""
        if x.dtype == np.float32:
            return native_norms.bn_stats(x)
        return self.numpy_statistics_forward(x)

    def numpy_statistics_forward(self, x: np.ndarray) -> np.ndarray:
        axes = (0,) + tuple(range(2, x.ndim))
        x = x.astype(np.float64)
        return np.stack([x.sum(axis=axes), (x * x).sum(axis=axes)])

    def _normalize_with(self, sig, x, stats, count=None):
        count = count or self.batch_count(sig)
        mean = stats[0] / count
        var = np.maximum(stats[1] / count - mean * mean, 0.0)
        inv_std = self._per_channel(1.0 / np.sqrt(var + self.eps), x.ndim)
        return (x - self._per_channel(mean, x.ndim)) * inv_std, inv_std

    def forward_tile_with_statistics(self, sig, x, weights, stats, count=None) -> Arrays:
        """The tile normalized with per-channel `stats` (sums of x and x^2) over `count`
        elements per channel (default: the batch's)."""
        if x.dtype == np.float32:
            count = count or self.batch_count(sig)
            return (native_norms.bn_forward(x, stats, *weights, count, self.eps, self.relu),)
        return self.numpy_forward_tile_with_statistics(sig, x, weights, stats, count)

    def numpy_forward_tile_with_statistics(self, sig, x, weights, stats, count=None) -> Arrays:
        gamma, beta = (self._per_channel(w, x.ndim) for w in weights)
        xhat, _ = self._normalize_with(sig, x, stats, count)
        z = gamma * xhat + beta
        return ((np.maximum(z, 0) if self.relu else z).astype(x.dtype),)

    def statistics_backward(self, sig, x, weights, y, dy, stats, count=None) -> np.ndarray:
        """(2, C_t): this tile's per-channel sums of dz and dz * xhat (dz: dy through the relu)."""
        if x.dtype == np.float32:
            count = count or self.batch_count(sig)
            return native_norms.bn_stats_backward(x, y, dy, stats, count, self.eps, self.relu)
        return self.numpy_statistics_backward(sig, x, weights, y, dy, stats, count)

    def numpy_statistics_backward(self, sig, x, weights, y, dy, stats, count=None) -> np.ndarray:
        axes = (0,) + tuple(range(2, x.ndim))
        dz = (dy * (y > 0) if self.relu else dy).astype(np.float64)
        xhat, _ = self._normalize_with(sig, x.astype(np.float64), stats, count)
        return np.stack([dz.sum(axis=axes), (dz * xhat).sum(axis=axes)])

    def backward_tile_with_statistics(
        self, sig, x, weights, y, dy, stats, grad_stats, count=None, tile_sums=None
    ):
        """This tile's dx, and its partial gamma and beta gradients (summed over the tiles):
        `tile_sums`, its own `statistics_backward` where known (`grad_stats` where the tile
        holds the batch), spares the C kernel a pass over the tile."""
        count = count or self.batch_count(sig)
        if x.dtype == np.float32:
            dx, dgamma, dbeta = native_norms.bn_backward(
                x, y, dy, weights[0], stats, grad_stats, count, self.eps, self.relu, tile_sums
            )
            return (dx,), (dgamma, dbeta)
        return self.numpy_backward_tile_with_statistics(
            sig, x, weights, y, dy, stats, grad_stats, count
        )

    def numpy_backward_tile_with_statistics(
        self, sig, x, weights, y, dy, stats, grad_stats, count=None
    ):
        axes = (0,) + tuple(range(2, x.ndim))
        count = count or self.batch_count(sig)
        dz = dy * (y > 0) if self.relu else dy
        xhat, inv_std = self._normalize_with(sig, x.astype(np.float64), stats, count)
        gamma = self._per_channel(weights[0], x.ndim)
        dxhat = dz * gamma
        sum_dxhat = gamma * self._per_channel(grad_stats[0], x.ndim)
        sum_dxhat_xhat = gamma * self._per_channel(grad_stats[1], x.ndim)
        dx = (count * dxhat - sum_dxhat - xhat * sum_dxhat_xhat) * (inv_std / count)
        grads = ((dz * xhat).sum(axis=axes), dz.sum(axis=axes))
        return (dx.astype(x.dtype),), tuple(g.astype(x.dtype) for g in grads)


def _tile_count(x: np.ndarray) -> int:
    """Elements per channel of a (N, C, ...) tile: what its own statistics are over."""
    return x.size // x.shape[1]
