"""Multi-head attention (Vaswani et al. 2017): sample and query-length dims split (paper §4)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from . import blas, native_gemm
from .base import Arrays, Dim, DimKind, GradientsInto, Op, Region, Signature, TensorSpec, WeightSpec
from .checks import expect_float, expect_inputs, expect_non_negative, expect_positive, expect_rank
from .registry import register

SOFTMAX_FLOPS = 5
"""Per score: subtract the max, exp, sum, divide, plus the 1/sqrt(head_dim) scale."""


@register
@dataclass(frozen=True, slots=True)
class MultiHeadAttention(GradientsInto, Op):
    """query (N, Lq, Eq), key (N, Lk, Ek), value (N, Lk, Ev) -> (N, Lq, embed_dim).

    Each query position attends to every key, so a tile of query positions reads all keys and
    values of its samples; the output channels mix every head and are not split.
    """

    kind = "multihead_attention"
    embed_dim: int
    num_heads: int
    kdim: int = 0
    vdim: int = 0
    dropout: float = 0.0
    bias: bool = True

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 3)
        expect_positive(self.kind, name, embed_dim=self.embed_dim, num_heads=self.num_heads)
        expect_non_negative(self.kind, name, kdim=self.kdim, vdim=self.vdim)
        if self.embed_dim % self.num_heads:
            raise ShapeError(
                f"multihead_attention '{name}': num_heads {self.num_heads} does not divide "
                f"embed_dim {self.embed_dim}; choose a num_heads that divides {self.embed_dim}."
            )
        if self.dropout != 0.0:
            raise ShapeError(
                f"multihead_attention '{name}': dropout on the attention probabilities is not "
                f"supported, got dropout={self.dropout}; pass dropout=0.0 and apply "
                "FFModel.dropout to the attention output instead."
            )
        query, key, value = inputs
        for what, spec in zip(("query", "key", "value"), inputs, strict=True):
            expect_float(self.kind, name, spec, what)
            expect_rank(self.kind, name, spec, (3,), what)
        if query.shape[0] != key.shape[0] or key.shape[:2] != value.shape[:2]:
            raise ShapeError(
                f"multihead_attention '{name}': query {query.shape}, key {key.shape} and value "
                f"{value.shape} must share the sample dim, and key and value the length dim; "
                "pass (N, Lq, Eq), (N, Lk, Ek) and (N, Lk, Ev)."
            )
        expected = {
            "query": (query, self.embed_dim),
            "key": (key, self.kdim or self.embed_dim),
            "value": (value, self.vdim or self.embed_dim),
        }
        for what, (spec, features) in expected.items():
            if spec.shape[-1] != features:
                raise ShapeError(
                    f"multihead_attention '{name}': {what} must have {features} features "
                    f"(embed_dim {self.embed_dim}, kdim {self.kdim}, vdim {self.vdim}; 0 means "
                    f"embed_dim), got shape {spec.shape}; set kdim/vdim to the key/value "
                    "feature sizes or project the input first."
                )
        embed = self.embed_dim
        weights = [
            WeightSpec(w, (embed, spec.shape[-1]), "glorot_uniform", spec.shape[-1], embed)
            for w, spec in (("wq", query), ("wk", key), ("wv", value))
        ]
        weights.append(WeightSpec("wo", (embed, embed), "glorot_uniform", embed, embed))
        if self.bias:
            weights += [WeightSpec(b, (embed,), "zeros") for b in ("bq", "bk", "bv", "bo")]
        out = TensorSpec(query.shape[:2] + (embed,))
        dims = (
            Dim("sample", DimKind.SAMPLE),
            Dim("length", DimKind.ATTRIBUTE),
            Dim("channel", None),
        )
        return Signature(tuple(inputs), (out,), tuple(weights), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        samples, positions, _ = region
        query, key, value = sig.inputs
        return (
            (samples, positions, (0, query.shape[-1])),
            (samples, (0, key.shape[1]), (0, key.shape[-1])),  # every key of the tile's samples
            (samples, (0, value.shape[1]), (0, value.shape[-1])),
        )

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        query, key, value = sig.inputs
        samples = region[0][1] - region[0][0]
        positions = region[1][1] - region[1][0]
        keys = key.shape[1]
        embed = self.embed_dim
        # a tile projects its queries and all keys and values of its samples
        projected = positions * query.shape[-1] + keys * (key.shape[-1] + value.shape[-1])
        projected += positions * embed  # the output projection
        projections = 2.0 * samples * embed * projected
        scores = samples * positions * keys
        attention = 2 * 2.0 * scores * embed  # Q K^T and P V, over all heads
        forward = projections + attention + SOFTMAX_FLOPS * scores * self.num_heads
        # every matmul has two gradient matmuls; the softmax gradient costs about as much again
        return forward, 2 * (projections + attention) + SOFTMAX_FLOPS * scores * self.num_heads

    # ---- reference kernels --------------------------------------------------------------------
    def _split_heads(self, x: np.ndarray) -> np.ndarray:
        n, length, _ = x.shape
        heads = x.reshape(n, length, self.num_heads, self.head_dim)  # (N, L, heads, head_dim)
        return heads.transpose(0, 2, 1, 3)  # (N, heads, L, head_dim)

    @staticmethod
    def _merge_heads(x: np.ndarray) -> np.ndarray:
        n, heads, length, head_dim = x.shape
        return x.transpose(0, 2, 1, 3).reshape(n, length, heads * head_dim)  # (N, L, embed)

    @staticmethod
    def _project(x: np.ndarray, w: np.ndarray, b=None) -> np.ndarray:
        """x (N, L, E) times w.T, plus b: one matrix product over all N * L rows (numpy's
        (N, L, E) @ (E, F) runs N small products)."""
        n, length, features = x.shape
        y = x.reshape(n * length, features) @ w.T
        if b is not None:
            y += b
        return y.reshape(n, length, w.shape[0])

    @staticmethod
    def _weight_grad(dy: np.ndarray, x: np.ndarray) -> np.ndarray:
        """sum over samples and positions of dy[n, l]^T x[n, l]: one matrix product (numpy's
        einsum of it loops in C without BLAS, 3.6x this op's forward time)."""
        return dy.reshape(-1, dy.shape[-1]).T @ x.reshape(-1, x.shape[-1])

    def _biases(self, weights: Sequence[np.ndarray]) -> tuple:
        return tuple(weights[4:8]) if self.bias else (None, None, None, None)

    def _attend(self, inputs, weights) -> tuple[np.ndarray, ...]:
        """Per-head queries, keys, values, the attention probabilities and the merged context."""
        query, key, value = inputs
        wq, wk, wv = weights[:3]
        bq, bk, bv, _ = self._biases(weights)
        q = self._split_heads(self._project(query, wq, bq))  # (N, h, Lq, d)
        k = self._split_heads(self._project(key, wk, bk))  # (N, h, Lk, d)
        v = self._split_heads(self._project(value, wv, bv))  # (N, h, Lk, d)
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(self.head_dim)  # (N, h, Lq, Lk)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probs = scores / scores.sum(axis=-1, keepdims=True)
        context = self._merge_heads(probs @ v)  # (N, Lq, embed)
        return q, k, v, probs, context

    # ---- CPU tiles: the C kernels (native/attention.c), which the C training step runs too ----
    skips_input_grads = True

    def _host_gemm(self, inputs, weights) -> int | None:
        """The sgemm for the C kernels when they take this tile: float32, no dropout, and MKL
        present (ops/blas.py); else None: numpy."""
        if self.dropout or any(a.dtype != np.float32 for a in (*inputs, *weights)):
            return None
        return blas.sgemm_address()

    def forward_tile(self, sig, region, inputs, weights) -> Arrays:
        return self.forward_tile_saving(sig, region, inputs, weights)[0]

    def forward_tile_saving(self, sig, region, inputs, weights) -> tuple[Arrays, object]:
        """`forward_tile`, keeping the projections, probabilities and context its backward in
        the same task reads (numpy's backward computed the forward again: 3x its time)."""
        gemm = self._host_gemm(inputs, weights)
        if gemm is None:
            return self.forward(inputs, weights), None
        y, scratch = native_gemm.attention_forward(gemm, inputs, weights, self.num_heads)
        return (y,), scratch

    def backward_tile_into(
        self, sig, region, inputs, weights, outputs, grad_outputs, need_input_grads,
        weight_grads_into, saved=None,
    ):  # fmt: skip
        gemm = self._host_gemm(inputs, weights)
        if gemm is None:
            return self.backward(inputs, weights, outputs, grad_outputs)
        if saved is None:
            saved = native_gemm.attention_forward(gemm, inputs, weights, self.num_heads)[1]
        return native_gemm.attention_backward(
            gemm, inputs, weights, self.num_heads, saved, grad_outputs[0], need_input_grads
        )

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        *_, context = self._attend(inputs, weights)
        return (self._project(context, weights[3], self._biases(weights)[3]),)

    def backward(self, inputs, weights, outputs, grad_outputs):
        query, key, value = inputs
        wq, wk, wv, wo = weights[:4]
        q, k, v, probs, context = self._attend(inputs, weights)
        (dy,) = grad_outputs  # (N, Lq, embed)
        d_wo = self._weight_grad(dy, context)
        d_context = self._split_heads(self._project(dy, wo.T))  # (N, h, Lq, d)
        d_probs = d_context @ v.transpose(0, 1, 3, 2)  # (N, h, Lq, Lk)
        d_v = probs.transpose(0, 1, 3, 2) @ d_context  # (N, h, Lk, d)
        d_scores = probs * (d_probs - (d_probs * probs).sum(axis=-1, keepdims=True))
        d_scores /= math.sqrt(self.head_dim)
        d_q = self._merge_heads(d_scores @ k)  # (N, Lq, embed)
        d_k = self._merge_heads(d_scores.transpose(0, 1, 3, 2) @ q)  # (N, Lk, embed)
        d_v = self._merge_heads(d_v)  # (N, Lk, embed)
        project = self._project
        grad_inputs = (project(d_q, wq.T), project(d_k, wk.T), project(d_v, wv.T))
        grad_weights = [
            self._weight_grad(d_q, query),
            self._weight_grad(d_k, key),
            self._weight_grad(d_v, value),
            d_wo,
        ]
        if self.bias:
            grad_weights += [g.sum(axis=(0, 1)) for g in (d_q, d_k, d_v, dy)]
        return grad_inputs, tuple(grad_weights)
