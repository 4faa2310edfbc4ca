"""A simulated timeline as a PNG Gantt chart: one row per device and link, tasks colored by kind."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from flexflow.figures import save_figure
from flexflow.simulator.export import RUNTIME, tasks_end_s
from flexflow.simulator.schedule import Schedule
from flexflow.simulator.task_views import BARRIER
from flexflow.simulator.taskgraph import TaskGraph

COLORS = {"compute": "#4c78a8", "update": "#54a24b", "comm": "#f58518"}
BACKWARD_COLOR = "#9ecae9"  # backward compute, lighter than forward
RUNTIME_COLOR = "#bab0ac"


def render_timeline(
    tg: TaskGraph, schedule: Schedule, path: str | os.PathLike[str], title: str = ""
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    rows = sorted({x for t in tg.live_tasks() for x in tg.res[t]})
    row_of = {x: i for i, x in enumerate(rows)}
    bars: dict[str, list[tuple[int, float, float]]] = {}
    for t in tg.live_tasks():
        if tg.kind[t] == BARRIER:
            continue
        color = COLORS[tg.kind[t]]
        if tg.kind[t] == "compute" and tg.name[t].endswith(".bwd"):
            color = BACKWARD_COLOR
        for x in tg.res[t]:
            bars.setdefault(color, []).append((row_of[x], schedule.start[t] * 1e3, tg.exe[t] * 1e3))
    names = [tg.resource_name(x) for x in rows]
    end = tasks_end_s(tg, schedule)
    beyond = schedule.iteration_s > end  # the cores' work outlasts the timeline
    if beyond:
        width_ms = (schedule.iteration_s - end) * 1e3
        bars.setdefault(RUNTIME_COLOR, []).append((len(rows), end * 1e3, width_ms))
        names.append(RUNTIME)
    fig, ax = plt.subplots(figsize=(12, max(2.5, 0.28 * len(names) + 1.2)))
    for color, items in bars.items():  # one collection per color: 78k bars draw in seconds
        ax.add_collection(PolyCollection(_boxes(items), facecolors=color, linewidths=0))
    ax.set_xlim(0, max(schedule.iteration_s * 1e3, 1e-9))
    ax.set_ylim(len(names) - 0.5, -0.5)  # the first row on top
    ax.set_yticks(range(len(names)), names, fontsize=6)
    ax.set_xlabel("time (ms)")
    ax.set_title(title or f"simulated iteration: {schedule.iteration_s * 1e3:.3f} ms")
    ax.legend(
        handles=[
            Patch(color=COLORS["compute"], label="forward"),
            Patch(color=BACKWARD_COLOR, label="backward"),
            Patch(color=COLORS["update"], label="weight update"),
            Patch(color=COLORS["comm"], label="transfer"),
            *([Patch(color=RUNTIME_COLOR, label=RUNTIME)] if beyond else []),
        ],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),  # beside the rows, covering none of them
        fontsize=7,
    )
    return save_figure(fig, path)


def _boxes(items: list[tuple[int, float, float]]) -> np.ndarray:
    """(bars, 4, 2) corners of bars 0.8 high centred on their rows, from (row, start, width)."""
    row, start, width = np.asarray(items, dtype=float).T
    low, high, end = row - 0.4, row + 0.4, start + width
    return np.stack([np.stack([start, low], 1), np.stack([end, low], 1),
                     np.stack([end, high], 1), np.stack([start, high], 1)], 1)  # fmt: skip
