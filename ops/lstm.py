"""One time step of an LSTM layer: recurrent layers are unrolled one op per step (paper §8.1).

`forward` and `backward` are the numpy reference; float32 tiles run native/lstm.c where MKL's
GEMM is there (ops/blas.py), within a few float32 ulps of it (its tanh is its own)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from flexflow.errors import ShapeError

from . import blas, native_gemm
from .activations import ACTIVATIONS, ActiMode
from .base import Arrays, Dim, DimKind, Op, Region, Signature, TensorSpec, WeightSpec, region_volume
from .checks import expect_float, expect_positive
from .registry import register

GATES = 4
"""Gates i, f, g, o, in PyTorch's order; every weight is laid out (gate, hidden unit, ...)."""

_sigmoid = ACTIVATIONS[ActiMode.AC_MODE_SIGMOID].forward


def _native_gemm(inputs, weights) -> int | None:
    """MKL's sgemm for the C step (native/lstm.c) when the tile is float32; None: numpy."""
    if any(a.dtype != np.float32 for a in (*inputs, *weights)):
        return None
    return blas.sgemm_address()


def _rows(weight: np.ndarray) -> np.ndarray:
    """A gate-major weight (4, H, ...) as one matrix (4H, ...): every gate in one product."""
    return weight.reshape(-1, weight.shape[-1])


# Per (sample, hidden unit): 4 bias adds, 3 sigmoids and 2 tanhs (4 each),
# c = f*c + i*g (3) and h = o*tanh(c) (1).
FORWARD_ELEMENTWISE_FLOPS = GATES + 5 * 4 + 3 + 1
# Per (sample, hidden unit): gradients through the two products and the tanh of c (8), and through
# the gate activations (3 each for the sigmoids, 2 for tanh g), plus the bias gradient sum (4).
BACKWARD_ELEMENTWISE_FLOPS = 8 + 3 * 3 + 2 + GATES


@register
@dataclass(frozen=True, slots=True)
class LSTM(Op):
    """inputs x [, h_prev, c_prev] -> (h, c), each (N, H).

    x is an (N, E) step input when `step` is None, or an (N, T, E) sequence read at time `step`.
    With x alone the previous state is zero (the first step). Splitting the hidden (channel)
    dim is a box on every weight: rows `[start, stop)` of dim 1 of w_ih, w_hh and bias.
    """

    kind = "lstm"
    hidden_size: int
    step: int | None = None

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        if len(inputs) not in (1, 3):
            raise ShapeError(
                f"lstm '{name}': expected 1 input (x) or 3 inputs (x, h_prev, c_prev), got "
                f"{len(inputs)}; pass the previous hidden and cell state together or neither."
            )
        expect_positive(self.kind, name, hidden_size=self.hidden_size)
        x = inputs[0]
        expect_float(self.kind, name, x, "x")
        if self.step is None:
            if len(x.shape) != 2:
                raise ShapeError(
                    f"lstm '{name}': step input x must be (sample, features), got shape "
                    f"{x.shape}; pass a (sample, length, features) sequence with step=t instead."
                )
        else:
            if len(x.shape) != 3:
                raise ShapeError(
                    f"lstm '{name}': with step={self.step}, x must be a (sample, length, features) "
                    f"sequence, got shape {x.shape}; pass step=None for an (N, E) step input."
                )
            if not 0 <= self.step < x.shape[1]:
                raise ShapeError(
                    f"lstm '{name}': step {self.step} is out of range for a sequence of length "
                    f"{x.shape[1]} (x {x.shape}); choose 0 <= step < {x.shape[1]}."
                )
        samples, features = x.shape[0], x.shape[-1]
        state = (samples, self.hidden_size)
        for what, spec in zip(("h_prev", "c_prev"), inputs[1:], strict=False):
            expect_float(self.kind, name, spec, what)
            if spec.shape != state:
                raise ShapeError(
                    f"lstm '{name}': {what} must have shape {state} (sample, hidden_size), got "
                    f"{spec.shape} with x {x.shape}; pass the state of the previous step of "
                    "the same layer."
                )
        hidden = self.hidden_size
        fan_out = GATES * hidden
        weights = (
            WeightSpec("w_ih", (GATES, hidden, features), "glorot_uniform", features, fan_out),
            WeightSpec("w_hh", (GATES, hidden, hidden), "glorot_uniform", hidden, fan_out),
            WeightSpec("bias", (GATES, hidden), "zeros"),
        )
        dims = (Dim("sample", DimKind.SAMPLE), Dim("channel", DimKind.PARAMETER))
        out = TensorSpec(state)
        return Signature(tuple(inputs), (out, out), weights, dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        samples, units = region
        x = sig.inputs[0]
        features = (0, x.shape[-1])  # every hidden unit reads all input features
        if self.step is None:
            x_region: Region = (samples, features)
        else:
            x_region = (samples, (self.step, self.step + 1), features)  # only slice `step`
        if len(sig.inputs) == 1:
            return (x_region,)
        # w_hh mixes every hidden unit of h_prev into each gate; c_prev is read element-wise
        return x_region, (samples, (0, self.hidden_size)), (samples, units)

    def weight_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        units = region[1]
        gates = (0, GATES)
        return (
            (gates, units, (0, sig.inputs[0].shape[-1])),
            (gates, units, (0, self.hidden_size)),
            (gates, units),
        )

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        elements = region_volume(region)  # (sample, hidden unit) pairs of the tile
        # the recurrent matmul is skipped on the first step, whose previous state is zero
        reduced = sig.inputs[0].shape[-1] + (self.hidden_size if len(sig.inputs) == 3 else 0)
        matmul = 2.0 * elements * GATES * reduced
        # backward: gradient of the inputs (dz W) and of the weights (dz^T x) each cost one matmul
        return (
            matmul + FORWARD_ELEMENTWISE_FLOPS * elements,
            2 * matmul + BACKWARD_ELEMENTWISE_FLOPS * elements,
        )

    # ---- reference kernels --------------------------------------------------------------------
    def _step_inputs(
        self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, ...]:
        """x (N, E), h_prev (N, H), c_prev (N, H_t), with a zero state on the first step.

        H_t is the hidden units the weights cover: all of them, or a parameter-split tile's.
        """
        x = inputs[0] if self.step is None else inputs[0][:, self.step, :]  # (N, E)
        if len(inputs) == 3:
            return x, inputs[1], inputs[2]
        w_ih, w_hh, _ = weights  # (4, H_t, E), (4, H_t, H)
        h_prev = np.zeros((x.shape[0], w_hh.shape[2]), dtype=x.dtype)
        c_prev = np.zeros((x.shape[0], w_ih.shape[1]), dtype=x.dtype)
        return x, h_prev, c_prev

    @staticmethod
    def _gates(x, h_prev, weights) -> tuple[np.ndarray, ...]:
        w_ih, w_hh, bias = weights  # (4, H, E), (4, H, H), (4, H)
        z = blas.matmul(x, _rows(w_ih).T) + blas.matmul(h_prev, _rows(w_hh).T)  # (N, 4H)
        z = z.reshape(x.shape[0], *bias.shape) + bias  # (N, 4, H)
        return _sigmoid(z[:, 0]), _sigmoid(z[:, 1]), np.tanh(z[:, 2]), _sigmoid(z[:, 3])

    def _tile_op(self) -> LSTM:
        """A tile of a sequence-reading step gets only its time slice, so it reads index 0 of it."""
        return self if self.step is None else replace(self, step=0)

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        return self.forward_tile_saving(sig, region, inputs, weights)[0]

    def forward_tile_saving(self, sig, region, inputs, weights):
        """The C step keeps its activated gates (n, 4 H_t) for a backward in the same task."""
        op, gemm = self._tile_op(), _native_gemm(inputs, weights)
        if gemm is None:
            return op.forward(inputs, weights), None
        x, h_prev, c_prev = op._native_step_inputs(inputs)
        w_ih, w_hh, bias = weights
        h, c, gates = native_gemm.lstm_forward(
            gemm, x, h_prev, c_prev, _rows(w_ih), _rows(w_hh), bias
        )
        return (h, c), gates

    def backward_tile(self, sig, region, inputs, weights, outputs, grad_outputs):
        return self._backward(inputs, weights, outputs, grad_outputs, None)

    def backward_tile_into(
        self, sig, region, inputs, weights, outputs, grad_outputs, need_input_grads, into,
        saved=None,
    ):  # fmt: skip
        return self._backward(inputs, weights, outputs, grad_outputs, saved)

    def _backward(self, inputs, weights, outputs, grad_outputs, gates):
        """The C step's backward from the forward's gates, or recomputing them (None)."""
        op, gemm = self._tile_op(), _native_gemm(inputs, weights)
        if gemm is None:
            return op.backward(inputs, weights, outputs, grad_outputs)
        x, h_prev, c_prev = op._native_step_inputs(inputs)
        w_ih, w_hh, bias = weights
        dh, dc = grad_outputs
        dx, dh_prev, dc_prev, dw_ih, dw_hh, db = native_gemm.lstm_backward(
            gemm, x, h_prev, c_prev, _rows(w_ih), _rows(w_hh), bias, outputs[1], dh, dc, gates
        )
        grad_weights = (
            dw_ih.reshape(w_ih.shape),
            dw_hh.reshape(w_hh.shape),
            db.reshape(bias.shape),
        )
        if op.step is not None:
            seq = np.zeros_like(inputs[0])  # only slice `step` was read
            seq[:, op.step, :] = dx
            dx = seq
        if len(inputs) == 1:
            return (dx,), grad_weights
        return (dx, dh_prev, dc_prev), grad_weights

    def _native_step_inputs(self, inputs) -> tuple:
        """x (N, E), h_prev and c_prev (None on the first step) for the C kernels."""
        x = inputs[0] if self.step is None else inputs[0][:, self.step, :]
        return (x, *inputs[1:]) if len(inputs) == 3 else (x, None, None)

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        x, h_prev, c_prev = self._step_inputs(inputs, weights)
        i, f, g, o = self._gates(x, h_prev, weights)
        c = f * c_prev + i * g
        return o * np.tanh(c), c

    def backward(self, inputs, weights, outputs, grad_outputs):
        x, h_prev, c_prev = self._step_inputs(inputs, weights)
        w_ih, w_hh, _ = weights
        i, f, g, o = self._gates(x, h_prev, weights)
        _, c = outputs
        dh, dc = grad_outputs
        tanh_c = np.tanh(c)
        dc = dc + dh * o * (1 - tanh_c * tanh_c)  # c reaches the loss directly and through h
        dz = np.stack(
            [
                dc * g * i * (1 - i),
                dc * c_prev * f * (1 - f),
                dc * i * (1 - g * g),
                dh * tanh_c * o * (1 - o),
            ],
            axis=1,
        )  # (N, 4, H)
        dz_rows = dz.reshape(dz.shape[0], -1)  # (N, 4H)
        dx = blas.matmul(dz_rows, _rows(w_ih))  # (N, E)
        grad_weights = (
            blas.matmul(dz_rows.T, x).reshape(w_ih.shape),  # (4, H, E)
            blas.matmul(dz_rows.T, h_prev).reshape(w_hh.shape),  # (4, H, H)
            dz.sum(axis=0),
        )
        if self.step is not None:
            seq = np.zeros_like(inputs[0])  # (N, T, E): only slice `step` was read
            seq[:, self.step, :] = dx
            dx = seq
        if len(inputs) == 1:
            return (dx,), grad_weights
        dh_prev = blas.matmul(dz_rows, _rows(w_hh))  # (N, H)
        return (dx, dh_prev, dc * f), grad_weights
