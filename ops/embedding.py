"""Embedding lookup of integer ids, optionally summed or averaged over a bag (paper §8.1, NMT)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import ShapeError

from . import native_sparse
from .base import Arrays, Dim, DimKind, Op, Region, Signature, TensorSpec, WeightSpec, region_volume
from .checks import expect_inputs, expect_member, expect_positive, expect_rank
from .layouts import dim_names
from .registry import register


class AggrMode(enum.Enum):
    """How a bag of ids along the input's last dimension is combined (FlexFlow's `AGGR_MODE_*`)."""

    AGGR_MODE_NONE = "none"
    AGGR_MODE_SUM = "sum"
    AGGR_MODE_AVG = "avg"


@register
@dataclass(frozen=True, slots=True)
class Embedding(Op):
    """ids (N,) or (N, T) -> rows of a (num_embeddings, embedding_dim) table.

    NONE looks up every id: (N,) -> (N, E), (N, T) -> (N, T, E). SUM and AVG combine the K ids
    of each sample: (N, K) -> (N, E). Splitting the channel dim E splits the table by columns.
    """

    kind = "embedding"
    num_embeddings: int
    embedding_dim: int
    aggr: AggrMode = AggrMode.AGGR_MODE_NONE

    @property
    def _aggregates(self) -> bool:
        return self.aggr is not AggrMode.AGGR_MODE_NONE

    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        expect_inputs(self.kind, name, inputs, 1)
        (ids,) = inputs
        expect_positive(
            self.kind, name, num_embeddings=self.num_embeddings, embedding_dim=self.embedding_dim
        )
        expect_member(self.kind, name, aggr=(self.aggr, AggrMode))
        if ids.dtype.is_float:
            raise ShapeError(
                f"embedding '{name}': input must be an integer (int32/int64) tensor of ids, got "
                f"{ids.dtype.value} tensor of shape {ids.shape}; create the input with "
                "DataType.DT_INT32 or DT_INT64."
            )
        expect_rank(self.kind, name, ids, (1, 2))
        if self._aggregates and len(ids.shape) != 2:
            raise ShapeError(
                f"embedding '{name}': aggregation {self.aggr.value!r} combines the ids along the "
                f"last dim of an (N, K) input, got shape {ids.shape}; add a bag dimension or use "
                "AGGR_MODE_NONE."
            )
        rows = ids.shape[:1] if self._aggregates else ids.shape
        out = TensorSpec(rows + (self.embedding_dim,))
        weight = WeightSpec(
            "weight",
            (self.num_embeddings, self.embedding_dim),
            "normal",
            self.num_embeddings,
            self.embedding_dim,
        )
        names = dim_names(len(out.shape))
        dims = (
            (Dim("sample", DimKind.SAMPLE),)
            + tuple(Dim(n, DimKind.ATTRIBUTE) for n in names[1:-1])
            + (Dim("channel", DimKind.PARAMETER),)
        )
        return Signature((ids,), (out,), (weight,), dims)

    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        if self._aggregates:
            bag = sig.inputs[0].shape[1]
            return ((region[0], (0, bag)),)  # a sample's output reads its whole bag of ids
        return (region[:-1],)  # the ids of the tile's samples (and positions)

    def weight_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        # any id may occur, so every row; a channel split reads only its columns
        return (((0, self.num_embeddings), region[-1]),)

    def index_limit(self, sig: Signature, which: int) -> int | None:
        return self.num_embeddings  # its one input: ids of the table's rows

    def index_terms(self, sig: Signature, limit: int, bad: int, high: int) -> tuple[str, str, str]:
        fix = (
            "ids are row numbers from 0: map them into its range"
            if bad < 0
            else f"give the embedding num_embeddings > {high} or map the ids into its range"
        )
        return "id", f"{limit} rows", fix

    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        outputs = region_volume(region)
        if not self._aggregates:
            return 0.0, float(outputs)  # a gather; backward adds each gradient into its row
        bag = sig.inputs[0].shape[1]
        divide = outputs if self.aggr is AggrMode.AGGR_MODE_AVG else 0
        return float(outputs * (bag - 1) + divide), float(outputs * bag + divide)

    def check_ids(self, ids: np.ndarray) -> None:
        """Refuse ids outside the table, naming the range found and the fix."""
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            raise ShapeError(
                f"embedding ({self.num_embeddings} x {self.embedding_dim}): ids must lie in "
                f"[0, {self.num_embeddings}), got ids in [{ids.min()}, {ids.max()}]; remap the "
                "ids or enlarge num_embeddings."
            )

    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        (ids,) = inputs
        (table,) = weights
        self.check_ids(ids)
        rows = table[ids]  # ids.shape + (E,)
        if self.aggr is AggrMode.AGGR_MODE_SUM:
            return (rows.sum(axis=1),)  # (N, E)
        if self.aggr is AggrMode.AGGR_MODE_AVG:
            return (rows.mean(axis=1),)  # (N, E)
        return (rows,)

    def backward(self, inputs, weights, outputs, grad_outputs):
        (ids,) = inputs
        (table,) = weights
        (dy,) = grad_outputs
        if self._aggregates:
            bag = ids.shape[1]
            scale = 1.0 / bag if self.aggr is AggrMode.AGGR_MODE_AVG else 1.0
            dy = np.broadcast_to(dy[:, None, :] * scale, ids.shape + dy.shape[-1:])  # (N, K, E)
        if table.dtype == np.float32 and ids.dtype == np.int32:  # numpy's add.at, 30x slower
            grad = native_sparse.embedding_backward(ids, dy, table.shape[0])
            if grad is None:
                self.check_ids(ids)  # names the ids out of range
            return (None,), (grad,)
        grad_table = np.zeros_like(table)
        np.add.at(grad_table, ids.reshape(-1), dy.reshape(-1, dy.shape[-1]))  # repeated ids add up
        return (None,), (grad_table,)
