"""FlexFlow's Keras regularizers (its flexflow.keras.regularizers: L1 and L2, each a `type`
and a `_lambda`; Keras' L1L2 too). A Dense layer takes an L2 one as its kernel_regularizer
(`flexflow.regularizers`: its kernel's gradient gains l2 * W once per step); an L1 one, a
bias or activity regularizer, and a regularizer on any other layer are refused by name, as
FlexFlow's kernels compute only L2 on a dense kernel."""

from __future__ import annotations

from flexflow.regularizers import L1, L1L2, L2, Regularizer

__all__ = ["L1", "L1L2", "L2", "Regularizer"]
