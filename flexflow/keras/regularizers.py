"""FlexFlow's Keras regularizers, as values a layer can be given; a layer given one refuses
it by name (no per-layer penalty here: the optimizer's weight_decay is an L2 on every
weight)."""

from __future__ import annotations

from dataclasses import dataclass


class Regularizer:
    """Base of the regularizers."""


@dataclass(frozen=True)
class L1(Regularizer):
    l1: float = 0.01


@dataclass(frozen=True)
class L2(Regularizer):
    l2: float = 0.01


@dataclass(frozen=True)
class L1L2(Regularizer):
    l1: float = 0.0
    l2: float = 0.0


__all__ = ["L1", "L1L2", "L2", "Regularizer"]
