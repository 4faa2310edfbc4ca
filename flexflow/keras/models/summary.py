"""A Keras model's summary table: each layer's name and kind, output shape, parameters and
the layers it reads (inputs first, then the layers in the model's order)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flexflow.keras.tensor import KerasTensor, Node

COLUMNS = ("Layer (type)", "Output Shape", "Param #", "Connected to")


def summary_table(inputs: Sequence[KerasTensor], nodes: Sequence[Node], ffmodel: Any) -> str:
    """The table as text; the batch size is -b's once compiled, None before."""
    batch = None if ffmodel is None else ffmodel.config.batch_size
    rows = [(f"{t.name} (InputLayer)", str((batch, *t.shape)), "0", "") for t in inputs]
    for node in nodes:
        layer = node.layer
        rows.append(
            (
                f"{layer.name} ({layer.kind})",
                str((batch, *node.outputs[0].shape)),
                f"{layer.param_count:,}",
                ", ".join(t.from_layer.name for t in node.inputs if t.from_layer is not None),
            )
        )
    widths = [max(len(r[i]) for r in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    total = sum(node.layer.param_count for node in nodes)
    text = [line.format(*COLUMNS).rstrip(), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    text += [line.format(*row).rstrip() for row in rows]
    text.append(f"Total params: {total:,}")
    return "\n".join(text)


__all__ = ["summary_table"]
