"""The operator library: one module per operator kind, each registered in `OP_KINDS` (installed as `flexflow.ops`)."""

from __future__ import annotations

from importlib import import_module

from .activations import ACTIVATIONS, ActiMode
from .base import (
    Dim,
    DimKind,
    DType,
    Op,
    Region,
    Shape,
    Signature,
    TensorSpec,
    TileCost,
    WeightSpec,
)
from .registry import OP_KINDS

# Every operator kind, by module. Importing a module registers its op class.
OP_MODULES = (
    "batch_matmul",
    "batch_norm",
    "concat",
    "conv2d",
    "dense",
    "dropout",
    "element_binary",
    "element_unary",
    "embedding",
    "flat",
    "gather",
    "layer_norm",
    "lstm",
    "mean",
    "multihead_attention",
    "pool2d",
    "reduce_sum",
    "reshape",
    "softmax",
    "split",
    "stack",
    "transpose",
)

for _module in OP_MODULES:
    import_module(f"{__name__}.{_module}")

__all__ = [
    "ACTIVATIONS",
    "ActiMode",
    "DType",
    "Dim",
    "DimKind",
    "OP_KINDS",
    "OP_MODULES",
    "Op",
    "Region",
    "Shape",
    "Signature",
    "TensorSpec",
    "TileCost",
    "WeightSpec",
]
