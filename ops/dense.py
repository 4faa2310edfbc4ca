"""Dense (fully connected) layer y = act(x W^T + b): sample and channel (parameter) dims (paper Table 1, matmul)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from . import blas, native_gemm
from .activations import ACTIVATIONS, ActiMode
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
    writable_into,
)
from .checks import expect_float, expect_inputs, expect_member, expect_positive
from .layouts import features_last_names
from .registry import register

_FLOAT32 = np.dtype(np.float32)


@register
@dataclass(frozen=True, slots=True)
class Dense(GradientsInto, Op):
    """x (..., in) -> (..., out_dim). Leading dims other than the first are attributes (e.g. time)."""

    kind = "dense"
    out_dim: int
    activation: ActiMode = ActiMode.AC_MODE_NONE
    use_bias: bool = True

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (x,) = inputs
        expect_float(self.kind, name, x)
        expect_positive(self.kind, name, out_dim=self.out_dim)
        expect_member(self.kind, name, activation=(self.activation, ActiMode))
        if len(x.shape) < 2:
            raise ShapeError(
                f"dense '{name}': input must have rank >= 2 (sample, ..., features), got shape "
                f"{x.shape}; add a batch dimension."
            )
        in_dim = x.shape[-1]
        out = TensorSpec(x.shape[:-1] + (self.out_dim,))
        weights = [
            WeightSpec("kernel", (self.out_dim, in_dim), "glorot_uniform", in_dim, self.out_dim)
        ]
        if self.use_bias:
            weights.append(WeightSpec("bias", (self.out_dim,), "zeros"))
        between = features_last_names(len(out.shape))[1:-1]
        dims = (
            (Dim("sample", DimKind.SAMPLE),)
            + tuple(Dim(n, DimKind.ATTRIBUTE) for n in between)
            + (Dim("channel", DimKind.PARAMETER),)
        )
        return Signature((x,), (out,), tuple(weights), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        in_dim = sig.inputs[0].shape[-1]
        return (region[:-1] + ((0, in_dim),),)  # every output channel reads all input features

    def weight_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        in_dim = sig.inputs[0].shape[-1]
        out_rows = region[-1]  # a parameter split reads only its rows of W (and b)
        regions: tuple[Region, ...] = ((out_rows, (0, in_dim)),)
        return regions + ((out_rows,),) if self.use_bias else regions

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        in_dim = sig.inputs[0].shape[-1]
        outputs = region_volume(region)
        act = ACTIVATIONS[self.activation].flops_per_element
        forward = 2.0 * outputs * in_dim + (outputs if self.use_bias else 0) + act * outputs
        # grad input (x = dy W) and grad kernel (dW = dy^T x) each cost one matmul
        return forward, 2 * 2.0 * outputs * in_dim + act * outputs + outputs

    def _pre_activation(self, x: np.ndarray, weights: Sequence[np.ndarray]) -> np.ndarray:
        z = x @ weights[0].T  # (..., out)
        return z + weights[1] if self.use_bias else z

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (x,) = inputs
        return (ACTIVATIONS[self.activation].forward(self._pre_activation(x, weights)),)

    def _host_gemm(self, x: np.ndarray, weights: Sequence[np.ndarray]) -> int | None:
        """The sgemm for the C kernels (ops/native_gemm.py `dense_forward`) when they take this
        tile: float32 and MKL present (ops/blas.py); else None: numpy."""
        if x.dtype != _FLOAT32:
            return None
        if weights[0].dtype != _FLOAT32 or (self.use_bias and weights[1].dtype != _FLOAT32):
            return None
        return blas.sgemm_address()

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        return self.forward_tile_saving(sig, region, inputs, weights)[0]

    def forward_tile_saving(self, sig, region, inputs, weights) -> tuple[Arrays, object]:
        """`forward_tile`, keeping the pre-activation where the activation's gradient reads it
        (GELU's, with its inner tanh), which the backward would otherwise compute again: a
        whole matrix product, and a tanh per value."""
        gemm = self._host_gemm(inputs[0], weights)
        if gemm is None:
            return self.forward(inputs, weights), None
        (x,) = inputs
        bias = weights[1] if self.use_bias else None
        keep = ACTIVATIONS[self.activation].grad_needs_input
        act = native_gemm.ACTIVATION_CODES[self.activation]
        made = native_gemm.dense_forward(
            gemm, x.reshape(-1, x.shape[-1]), weights[0], bias, act, keep
        )
        y, kept = made if keep else (made, None)  # kept: (pre-activation, GELU's tanh)
        return (y.reshape(x.shape[:-1] + y.shape[-1:]),), kept  # (..., out)

    skips_input_grads = True

    def backward(self, inputs, weights, outputs, grad_outputs, need_input_grads=True, into=()):
        """`into`: see `backward_tile_into` (the kernel's and the bias's gradients)."""
        (x,) = inputs
        (y,) = outputs
        kernel = weights[0]
        activation = ACTIVATIONS[self.activation]
        z = self._pre_activation(x, weights) if activation.grad_needs_input else y
        dz = activation.grad(z, y, grad_outputs[0])  # (..., out)
        dz2 = dz.reshape(-1, dz.shape[-1])  # (N, out)
        x2 = x.reshape(-1, x.shape[-1])  # (N, in)
        into = list(into) + [None] * (2 - len(into))
        grads = [
            np.matmul(dz2.T, x2, out=writable_into(into[0], (dz2.shape[1], x2.shape[1]), dz2, x2))
        ]
        if self.use_bias:
            grads.append(np.sum(dz2, axis=0, out=writable_into(into[1], dz2.shape[1:], dz2)))
        return (dz @ kernel if need_input_grads else None,), tuple(grads)

    def backward_tile_into(
        self, sig, region, inputs, weights, outputs, grad_outputs, need_input_grads,
        weight_grads_into, saved=None,
    ):  # fmt: skip
        (x,) = inputs
        gemm = self._host_gemm(x, weights)
        if gemm is None:
            return self.backward(
                inputs, weights, outputs, grad_outputs, need_input_grads, weight_grads_into
            )
        x2 = x.reshape(-1, x.shape[-1])  # (N, in)
        n = weights[0].shape[0]
        into = list(weight_grads_into) + [None] * (2 - len(weight_grads_into))
        dw = writable_into(into[0], (n, x2.shape[1]), x2)
        grads = [np.empty((n, x2.shape[1]), np.float32) if dw is None else dw]
        if self.use_bias:
            db = writable_into(into[1], (n,), x2)
            grads.append(np.empty(n, np.float32) if db is None else db)
        pre = kept = None
        if ACTIVATIONS[self.activation].grad_needs_input:  # GELU's: kept by the forward
            pre, kept = saved if saved is not None else (self._pre_activation(x2, weights), None)
        dx = native_gemm.dense_backward(
            gemm, x2, weights[0], outputs[0].reshape(-1, n), pre, grad_outputs[0].reshape(-1, n),
            grads[0], grads[1] if self.use_bias else None,
            native_gemm.ACTIVATION_CODES[self.activation], need_input_grads, kept,
        )  # fmt: skip
        return (None if dx is None else dx.reshape(x.shape),), tuple(grads)
