"""The measured timeline of a training run as a Chrome/Perfetto trace, beside the simulated one.

Each task body times itself (`Executor(record_timeline=True)`); here every task becomes a slice
on the track of the processor (thread) that ran it, named like the simulator's tasks
(`conv1[0].fwd`) on a track named like its device (`n0.cpu0`), so the simulated and the
measured iteration can be opened side by side in ui.perfetto.dev. A step run as one C call is a slice with each op's forward and backward and
the loss nested in it (`Executor.step_ops_timeline`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flexflow.fileio import atomic_write_text
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.runtime.native_step import LOG_OPS, LOG_STEP, LOG_UPDATE, NativeStep
from flexflow.runtime.passes import Pass
from flexflow.strategy import Strategy

_STEP_PASSES = {LOG_UPDATE: Pass.UPDATE, LOG_STEP: Pass.FUSED_STEP}
_PASSES_INSIDE = {"forward": Pass.FORWARD, "backward": Pass.BACKWARD, "loss": Pass.LOSS}


def take_step_logs(
    programs: Mapping[tuple[int, int], NativeStep],
    groups: Sequence[Any],
    timeline: list[tuple],
    inside: list[tuple],
) -> None:
    """Move what the C steps `programs` ((group, task index) -> program) logged since the
    last take (`NativeStep.take_log`) into `timeline` (their updates, as op -1, and the steps,
    as the group's last op) and `inside` (their ops' passes), as (op, task, pass, start s,
    end s, thread) entries like the Python task bodies'."""
    for (group, index), program in programs.items():
        last = groups[group].ops[-1]
        for begin, end, thread, what in program.take_log():
            if what >= LOG_OPS:  # an op's pass inside a step
                op, part = program.op_pass(what)
                inside.append((op, index, _PASSES_INSIDE[part], begin, end, int(thread)))
            else:
                op = -1 if what == LOG_UPDATE else last
                timeline.append((op, index, _STEP_PASSES[int(what)], begin, end, int(thread)))


def _task_name(graph: OperatorGraph, op: int, index: int, which: Pass) -> str:
    if which is Pass.UPDATE:  # an update task (op: its processor) or one inside a step (-1)
        # (one run with the step after it, beside its slice, or alone after the last step)
        return f"update (processor {op})" if op >= 0 else f"update [{index}] (one C call)"
    if which is Pass.FEED:
        return f"feed {graph.tensors[op].name}[{index}]" if op >= 0 else "store fill"
    if which is Pass.FUSED_STEP:  # a step run as one C call (flexflow.runtime.native_step)
        return f"step up to {graph.ops[op].name}[{index}] (one C call)"
    if which is Pass.FUSED_FORWARD_LOSS:  # an evaluation batch run so (NativeStep.evaluate)
        return f"evaluation up to {graph.ops[op].name}[{index}] (one C call)"
    part = _PART_NAMES.get(which, which.name.lower())
    return f"{graph.ops[op].name}[{index}].{part}"  # the simulator's names (TaskGraph.task_name)


_PART_NAMES = {Pass.FORWARD: "fwd", Pass.BACKWARD: "bwd"}
_OP_TASKS = (Pass.FORWARD, Pass.BACKWARD, Pass.LOSS, Pass.FUSED_STEP, Pass.FUSED_FORWARD_LOSS)
"""The passes whose (op, tile) entries tell which device's processor a thread is."""


def _track_names(
    timeline: Sequence[tuple], strategy: Strategy | None, machine: Machine | None
) -> dict[int, str]:
    """Each thread's track name, in track order: the device whose tiles it ran, as the
    simulated trace names it (n0.cpu1), by device id; "processor thread N" when unknown.
    Threads are numbered by when they first ran a task, which differs from run to run."""
    threads = list(dict.fromkeys(e[5] for e in timeline))
    device: dict[int, int] = {}
    if strategy is not None and machine is not None:
        for op, index, which, _, _, thread in timeline:
            if op >= 0 and which in _OP_TASKS and thread not in device:
                device[thread] = strategy[op].devices[index]
    named = sorted((t for t in threads if t in device), key=lambda t: device[t])
    names = {t: machine.devices[device[t]].name for t in named} if machine else {}
    if len(set(names.values())) < len(names):  # two threads for one device: say which
        names = {t: f"{name} (thread {threads.index(t)})" for t, name in names.items()}
    rest = [t for t in threads if t not in device]
    return names | {t: f"processor thread {threads.index(t)}" for t in rest}


def _is_fill(entry: tuple) -> bool:
    """A store fill (FEED of op -1): a new store zeroed, not a task of the model."""
    return entry[2] is Pass.FEED and entry[0] < 0


def measured_trace(
    graph: OperatorGraph,
    timeline: list[tuple],
    title: str = "",
    inside: Sequence[tuple] = (),
    strategy: Strategy | None = None,
    machine: Machine | None = None,
) -> dict[str, Any]:
    """Trace Event Format: one track per processor thread, times in microseconds from the first
    recorded task; `inside`: the ops' passes inside C steps (nested in their steps' slices).
    With the `strategy` trained and the `machine` its devices are numbered on, each track is
    named after its device and the tracks are in device order, as in the simulated trace.
    Store fills that end before any other task begins are set-up (new stores zeroed, the
    first launch's compilation after them), not the timeline's: they are left out."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": 0, "name": "process_name", "args": {"name": title or "measured"}}
    ]
    work = [e for e in timeline if not _is_fill(e)]
    if work:
        first = min(entry[3] for entry in work)
        timeline = [e for e in timeline if not (_is_fill(e) and e[4] < first)]
    if not timeline:
        return {"traceEvents": events, "displayTimeUnit": "ms"}
    origin = min(entry[3] for entry in timeline)
    names = _track_names(timeline, strategy, machine)
    tracks = {thread: i for i, thread in enumerate(names)}
    for thread, track in tracks.items():
        events.append(
            {
                "ph": "M",
                "pid": 0,
                "tid": track,
                "name": "thread_name",
                "args": {"name": names[thread]},
            }
        )
    for entries, category in ((timeline, ""), (inside, " in C step")):
        for op, index, which, start, end, thread in entries:
            if thread not in tracks:  # (an op inside a step whose own entry was cleared)
                continue
            events.append(
                {
                    "ph": "X",
                    "pid": 0,
                    "tid": tracks[thread],
                    "name": _task_name(graph, op, index, which),
                    "cat": which.name.lower() + category,
                    "ts": (start - origin) * 1e6,
                    "dur": (end - start) * 1e6,
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_measured_trace(
    path: str | os.PathLike[str],
    graph: OperatorGraph,
    timeline: list[tuple],
    title: str = "",
    inside: Sequence[tuple] = (),
    strategy: Strategy | None = None,
    machine: Machine | None = None,
) -> Path:
    trace = measured_trace(graph, timeline, title, inside, strategy, machine)
    return atomic_write_text(path, json.dumps(trace))
