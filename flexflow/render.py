"""Pictures of an operator graph: Graphviz DOT text, and a PNG drawn with matplotlib (no Graphviz needed)."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from flexflow.figures import save_figure
from flexflow.graph import OperatorGraph

# One color per op kind family, so branches and layer types stand out.
KIND_COLORS: dict[str, str] = {
    "conv2d": "#8ecae6",
    "pool2d": "#bde0fe",
    "dense": "#ffb703",
    "embedding": "#fb8500",
    "lstm": "#e76f51",
    "multihead_attention": "#f4a261",
    "batch_matmul": "#e9c46a",
    "batch_norm": "#cdb4db",
    "layer_norm": "#cdb4db",
    "softmax": "#90be6d",
}
DEFAULT_COLOR = "#e5e5e5"
INPUT_COLOR = "#ffffff"


def _shape(shape: tuple[int, ...]) -> str:
    return "×".join(str(s) for s in shape)


def _quoted(name: str) -> str:
    """`name` inside a DOT string: a user's layer name may hold quotes or backslashes."""
    return name.replace("\\", "\\\\").replace('"', '\\"')


def to_dot(graph: OperatorGraph) -> str:
    """Graphviz DOT: one box per op (name, kind, output shape), one edge per tensor read."""
    lines = [
        "digraph operator_graph {",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica"];',
    ]
    for tensor in graph.input_tensors:
        lines.append(
            f'  "in{tensor.id}" [label="{_quoted(tensor.name)}\\n{_shape(tensor.spec.shape)}", '
            f'fillcolor="{INPUT_COLOR}", shape=ellipse];'
        )
    for node in graph.ops:
        color = KIND_COLORS.get(node.kind, DEFAULT_COLOR)
        lines.append(
            f'  "op{node.id}" [label="{_quoted(node.name)}\\n{node.kind}\\n{_shape(node.sig.output_shape)}", '
            f'fillcolor="{color}"];'
        )
    for node in graph.ops:
        for tid in dict.fromkeys(node.inputs):
            producer = graph.tensor(tid).producer
            src = f"in{tid}" if producer is None else f"op{producer}"
            lines.append(f'  "{src}" -> "op{node.id}";')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _depths(graph: OperatorGraph) -> dict[int, int]:
    """Longest-path depth of every op from the inputs: the row it is drawn in."""
    depth: dict[int, int] = {}
    for node in graph.ops:
        parents = [graph.tensor(t).producer for t in node.inputs]
        depth[node.id] = 1 + max((depth[p] for p in parents if p is not None), default=0)
    return depth


SKIP_OFFSET = 0.45  # how far beside the boxes an edge past rows runs (a box is ~0.6 wide)
SKIP_COLOR = "#b04040"  # such edges (residual shortcuts, branches joining late) stand out


def render_png(graph: OperatorGraph, path: str | os.PathLike[str], title: str = "") -> Path:
    """Draw the graph top-down, one row per depth, and write it atomically as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    depth = _depths(graph)
    rows: dict[int, list[int]] = defaultdict(list)
    for op_id, d in depth.items():
        rows[d].append(op_id)
    position: dict[int, tuple[float, float]] = {}
    width = max(len(r) for r in rows.values()) if rows else 1
    for d, members in rows.items():
        for i, op_id in enumerate(members):
            position[op_id] = ((i + 0.5) * width / len(members), -d)
    inputs = graph.input_tensors
    input_pos = {t.id: ((i + 0.5) * width / max(len(inputs), 1), 0.0) for i, t in enumerate(inputs)}

    fig_w = min(max(4.0, 1.9 * width), 200.0)
    fig_h = min(max(3.0, 0.7 * (len(rows) + 1)), 200.0)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    for node in graph.ops:
        x1, y1 = position[node.id]
        for tid in dict.fromkeys(node.inputs):
            producer = graph.tensor(tid).producer
            x0, y0 = input_pos[tid] if producer is None else position[producer]
            start, color = (x0, y0 - 0.18), "#555555"
            if y0 - y1 > 1:  # past rows between: around their boxes, not behind them
                side, color = max(x0, x1) + SKIP_OFFSET, SKIP_COLOR
                start = (side, y1 + 0.5)
                ax.plot([x0, side, side], [y0 - 0.18, y0 - 0.5, y1 + 0.5], color=color, lw=0.6)
            ax.annotate(
                "",
                xy=(x1, y1 + 0.18),
                xytext=start,
                arrowprops={"arrowstyle": "->", "color": color, "lw": 0.6},
            )
    box = {"boxstyle": "round,pad=0.3", "lw": 0.5}
    for tensor in inputs:
        x, y = input_pos[tensor.id]
        ax.text(
            x,
            y,
            f"{tensor.name}\n{_shape(tensor.spec.shape)}",
            ha="center",
            va="center",
            fontsize=6,
            bbox={**box, "fc": INPUT_COLOR},
        )
    for node in graph.ops:
        x, y = position[node.id]
        ax.text(
            x,
            y,
            f"{node.name}\n{_shape(node.sig.output_shape)}",
            ha="center",
            va="center",
            fontsize=6,
            bbox={**box, "fc": KIND_COLORS.get(node.kind, DEFAULT_COLOR)},
        )
    ax.set_xlim(-0.2, width + SKIP_OFFSET + 0.1)
    ax.set_ylim(-(len(rows) + 0.8), 0.8)
    ax.axis("off")
    if title:
        ax.set_title(title)
    return save_figure(fig, path)
