"""Layer normalization over trailing axes (Ba et al. 2016): normalized axes do not split (§4)."""

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
from .checks import expect_float, expect_inputs, expect_positive_real, normalize_axis
from .layouts import dim_names
from .registry import register

FORWARD_FLOPS = 8
"""Per element: mean (1), centre (1), variance (2), scale by 1/std (1), affine (2), rsqrt."""
BACKWARD_FLOPS = 10
"""Per element: dy * gamma, two reductions, the combination (4), and the gamma and beta sums (3)."""


@register
@dataclass(frozen=True, slots=True)
class LayerNorm(GradientsInto, Op):
    """x (N, ...) -> (x - mean) / sqrt(var + eps) * gamma + beta over the last k axes (`axes`)."""

    kind = "layer_norm"
    axes: tuple[int, ...] = (-1,)
    elementwise_affine: bool = True
    eps: float = 1e-5

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", tuple(int(a) for a in self.axes))

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        expect_positive_real(self.kind, name, eps=self.eps)
        rank = len(x.shape)
        axes = sorted(normalize_axis(self.kind, name, a, rank, x.shape) for a in self.axes)
        trailing = list(range(rank - len(self.axes), rank))
        if not self.axes or axes != trailing:
            raise ShapeError(
                f"layer_norm '{name}': axes {self.axes} must be distinct and be the last k axes "
                f"of input {x.shape}; pass e.g. (-1,) or (-2, -1)."
            )
        if 0 in axes:
            raise ShapeError(
                f"layer_norm '{name}': axes {self.axes} include the sample axis 0 of input "
                f"{x.shape}; layer norm normalizes within a sample, drop axis 0."
            )
        normalized = x.shape[rank - len(axes) :]
        weights: tuple[WeightSpec, ...] = ()
        if self.elementwise_affine:
            weights = (
                WeightSpec("gamma", normalized, "ones"),
                WeightSpec("beta", normalized, "zeros"),
            )
        names = dim_names(rank)
        dims = tuple(
            Dim(n, None if i in axes else DimKind.SAMPLE if i == 0 else DimKind.ATTRIBUTE)
            for i, n in enumerate(names)
        )
        return Signature((x,), (x,), weights, dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        shape = sig.inputs[0].shape
        kept = len(shape) - len(self.axes)
        return (region[:kept] + tuple((0, s) for s in shape[kept:]),)  # whole normalized axes

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        elements = region_volume(self.input_regions(sig, region)[0])
        return float(FORWARD_FLOPS * elements), float(BACKWARD_FLOPS * elements)

    # ---- CPU tiles: the C kernels (native/layer_norm.c), which the C training step runs too ----
    skips_input_grads = True

    def _host(self, x: np.ndarray, weights: Sequence[np.ndarray]) -> bool:
        """Whether the C kernels take this tile: float32 throughout."""
        return x.dtype == np.float32 and all(w.dtype == np.float32 for w in weights)

    def _c_forward(self, x: np.ndarray, weights: Sequence[np.ndarray]):
        width = int(np.prod(x.shape[x.ndim - len(self.axes) :], dtype=np.int64))
        gamma, beta = weights if self.elementwise_affine else (None, None)
        y, saved = native_norms.layer_norm_forward(x, gamma, beta, width, self.eps)
        return y.reshape(x.shape), saved

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        return self.forward_tile_saving(sig, region, inputs, weights)[0]

    def forward_tile_saving(self, sig, region, inputs, weights) -> tuple[Arrays, object]:
        """`forward_tile`, keeping x_hat and each row's 1 / std for its backward in the same
        task (numpy's backward normalized again)."""
        (x,) = inputs
        if not self._host(x, weights):
            return self.forward(inputs, weights), None
        y, saved = self._c_forward(x, weights)
        return (y,), saved

    def backward_tile_into(
        self, sig, region, inputs, weights, outputs, grad_outputs, need_input_grads,
        weight_grads_into, saved=None,
    ):  # fmt: skip
        (x,) = inputs
        if not self._host(x, weights):
            return self.backward(inputs, weights, outputs, grad_outputs)
        if saved is None:
            saved = self._c_forward(x, weights)[1]
        gamma = weights[0] if self.elementwise_affine else None
        dx, dgamma, dbeta = native_norms.layer_norm_backward(
            saved, gamma, grad_outputs[0], need_input_grads
        )
        grads = () if gamma is None else (dgamma.reshape(gamma.shape), dbeta.reshape(gamma.shape))
        return (None if dx is None else dx.reshape(x.shape),), grads

    # ---- reference kernels --------------------------------------------------------------------
    def _normalize(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x_hat and 1/std, reduced over the trailing `len(axes)` axes."""
        axes = tuple(range(x.ndim - len(self.axes), x.ndim))
        centred = x - x.mean(axis=axes, keepdims=True)
        rstd = 1.0 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + self.eps)
        return centred * rstd, rstd

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        x_hat, _ = self._normalize(x)
        if self.elementwise_affine:
            gamma, beta = weights
            return (x_hat * gamma + beta,)
        return (x_hat,)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (x,) = inputs
        (dy,) = grad_outputs
        x_hat, rstd = self._normalize(x)
        normalized = tuple(range(x.ndim - len(self.axes), x.ndim))
        d_hat = dy * weights[0] if self.elementwise_affine else dy
        # d x = rstd * (d_hat - mean(d_hat) - x_hat * mean(d_hat * x_hat)) over the normalized axes
        dx = rstd * (
            d_hat
            - d_hat.mean(axis=normalized, keepdims=True)
            - x_hat * (d_hat * x_hat).mean(axis=normalized, keepdims=True)
        )
        if not self.elementwise_affine:
            return (dx,), ()
        kept = tuple(range(x.ndim - len(self.axes)))
        return (dx,), ((dy * x_hat).sum(axis=kept), dy.sum(axis=kept))
