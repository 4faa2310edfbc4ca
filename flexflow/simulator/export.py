"""Simulated timelines as files: a Chrome/Perfetto trace (one track per device and link) and the task graph as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from flexflow.fileio import atomic_write_text
from flexflow.simulator.schedule import Schedule
from flexflow.simulator.task_views import BARRIER
from flexflow.simulator.taskgraph import TaskGraph

TASKGRAPH_FORMAT = "flexflow-taskgraph"
TASKGRAPH_VERSION = 2  # 2: update tasks are kind "update"; `cores` added


def _device_label(tg: TaskGraph, t: int) -> str:
    if not tg.res[t]:
        return ""
    return "+".join(tg.resource_name(x) for x in tg.res[t])


RUNTIME = "cores' work beyond the timeline (kernels + runtime)"
"""The track of the time `TaskGraph.iteration_s` adds to the timeline, in traces and
timelines: the runtime's work per task leaves the cores no room to finish sooner."""


def tasks_end_s(tg: TaskGraph, schedule: Schedule) -> float:
    """When the timeline's last task ends."""
    return max((schedule.end[t] for t in tg.live_tasks()), default=0.0)


def exported_ids(tg: TaskGraph) -> dict[int, int]:
    """The number each exported file gives a task (its `args.task` in a trace, its `id` in a
    task graph): the live tasks in order, 0, 1, ..., the zero-time barriers left out."""
    kept = (t for t in tg.live_tasks() if tg.kind[t] != BARRIER)
    return {t: i for i, t in enumerate(kept)}


def chrome_trace(tg: TaskGraph, schedule: Schedule, title: str = "") -> dict[str, Any]:
    """Trace Event Format: one process per machine, one thread (track) per device and per link.

    A transfer appears on every link of its route. Times are in microseconds; each slice's
    `args.task` is the task's id in `taskgraph_json` (`exported_ids`).
    """
    ids = exported_ids(tg)
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": title or tg.machine.name}}
    ]
    used = sorted({x for t in tg.live_tasks() for x in tg.res[t]})
    for x in used:
        events.append(
            {
                "ph": "M",
                "pid": 0,
                "tid": x,
                "name": "thread_name",
                "args": {"name": tg.resource_name(x)},
            }
        )
        events.append(
            {"ph": "M", "pid": 0, "tid": x, "name": "thread_sort_index", "args": {"sort_index": x}}
        )
    for t, i in ids.items():
        for x in tg.res[t]:
            events.append(
                {
                    "ph": "X",
                    "pid": 0,
                    "tid": x,
                    "name": tg.name[t],
                    "cat": tg.kind[t],
                    "ts": schedule.start[t] * 1e6,
                    "dur": tg.exe[t] * 1e6,
                    "args": {"task": i, "bytes": tg.size_bytes[t]}
                    if tg.size_bytes[t]
                    else {"task": i},
                }
            )
    end = tasks_end_s(tg, schedule)
    if schedule.iteration_s > end:  # the cores' work outlasts the timeline (TaskGraph.iteration_s)
        track = tg.num_resources
        events += [
            {"ph": "M", "pid": 0, "tid": track, "name": "thread_name", "args": {"name": RUNTIME}},
            {"ph": "X", "pid": 0, "tid": track, "name": RUNTIME, "cat": "runtime",
             "ts": end * 1e6, "dur": (schedule.iteration_s - end) * 1e6},
        ]  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _real_preds(tg: TaskGraph, preds: list[list[int]], t: int) -> set[int]:
    """Predecessors of `t`, looking through zero-time barrier tasks to what they wait for."""
    found: set[int] = set()
    stack = list(preds[t])
    while stack:
        p = stack.pop()
        if tg.kind[p] == BARRIER:
            stack.extend(preds[p])
        else:
            found.add(p)
    return found


def taskgraph_json(tg: TaskGraph, schedule: Schedule) -> dict[str, Any]:
    """Every task with its timing and predecessors, so another program can check the timeline.

    `kind` is "compute" (forward, backward), "update" (a weight update) or "comm" (a transfer;
    `device` names the links of its route joined by "+"). Barriers are left out: their
    successors list what the barrier waited for. `iteration_ms` is the latest `end_ms` or,
    where the runtime's CPU time per iteration (`runtime_ms`) is counted, no less than the
    compute and update tasks' durations plus `runtime_ms`, over `cores`
    (`TaskGraph.iteration_s`).
    """
    ids = exported_ids(tg)
    preds = tg.predecessors()
    tasks = []
    for t, i in ids.items():
        tasks.append(
            {
                "id": i,
                "name": tg.name[t],
                "kind": tg.kind[t],
                "device": _device_label(tg, t),
                "duration_ms": tg.exe[t] * 1e3,
                "predecessors": sorted(ids[p] for p in _real_preds(tg, preds, t)),
                "ready_ms": schedule.ready[t] * 1e3,
                "start_ms": schedule.start[t] * 1e3,
                "end_ms": schedule.end[t] * 1e3,
                "bytes": tg.size_bytes[t],
            }
        )
    return {
        "format": TASKGRAPH_FORMAT,
        "version": TASKGRAPH_VERSION,
        "machine": tg.machine.name,
        "iteration_ms": schedule.iteration_s * 1e3,
        "runtime_ms": tg.runtime_s * 1e3,  # the runtime's CPU time (TaskGraph.runtime_s)
        "cores": tg.context.cores,
        "tasks": tasks,
    }


def write_trace(
    path: str | os.PathLike[str], tg: TaskGraph, schedule: Schedule, title: str = ""
) -> Path:
    return atomic_write_text(path, json.dumps(chrome_trace(tg, schedule, title)))


def write_taskgraph(path: str | os.PathLike[str], tg: TaskGraph, schedule: Schedule) -> Path:
    return atomic_write_text(path, json.dumps(taskgraph_json(tg, schedule)))
