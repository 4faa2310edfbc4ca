"""What one simulated iteration tells: time, busy time per device and link, bytes moved, compute, memory."""

from __future__ import annotations

from dataclasses import dataclass

from flexflow.simulator.schedule import Schedule
from flexflow.simulator.task_views import BARRIER, COMM, COMPUTE, UPDATE
from flexflow.simulator.taskgraph import TaskGraph


@dataclass(frozen=True, slots=True)
class SimulationResult:
    iteration_ms: float
    runtime_ms: float  # the runtime's CPU time per iteration (TaskGraph.runtime_s)
    compute_ms_total: float  # forward, backward and update tasks, summed over devices
    comm_bytes_total: int  # activations, gradients and parameter synchronization
    num_tasks: int  # barriers (zero-time bookkeeping) not counted, as in the exported files
    busy_ms: dict[str, float]  # per device and per link, by name
    peak_memory_bytes: tuple[int, ...]  # per device, by device id
    c_steps: bool = False  # each device's step one C call, priced so (TaskGraph.native)
    over_memory: tuple[str, ...] = ()  # devices whose peak exceeds their memory, by name

    def memory_note(self) -> str:
        """'' when every device holds its peak, else what exceeds and what to change."""
        return memory_note(self.over_memory)

    def to_json(self) -> dict:
        return {
            "iteration_ms": self.iteration_ms,
            "runtime_ms": self.runtime_ms,
            "compute_ms_total": self.compute_ms_total,
            "comm_bytes_total": self.comm_bytes_total,
            "num_tasks": self.num_tasks,
            "peak_memory_bytes": list(self.peak_memory_bytes),
            "busy_ms": self.busy_ms,
            "c_steps": self.c_steps,
            "over_memory": list(self.over_memory),
        }


def summarize(tg: TaskGraph, schedule: Schedule) -> SimulationResult:
    peak = tuple(tg.memory_per_device())
    compute_s = 0.0
    comm_bytes = 0
    busy = [0.0] * tg.num_resources
    count = 0
    for t in tg.live_tasks():
        kind = tg.kind[t]
        count += kind != BARRIER  # zero-time bookkeeping, not exported (export.exported_ids)
        if kind in (COMPUTE, UPDATE):
            compute_s += tg.exe[t]
        elif kind == COMM:
            comm_bytes += tg.size_bytes[t]
        for x in tg.res[t]:
            busy[x] += tg.exe[t]
    return SimulationResult(
        iteration_ms=schedule.iteration_s * 1e3,
        runtime_ms=tg.runtime_s * 1e3,
        compute_ms_total=compute_s * 1e3,
        comm_bytes_total=comm_bytes,
        num_tasks=count,
        busy_ms={tg.resource_name(x): b * 1e3 for x, b in enumerate(busy) if b > 0},
        peak_memory_bytes=peak,
        c_steps=tg.native,
        over_memory=over_memory(tg, peak),
    )


def over_memory(tg: TaskGraph, peak: tuple[int, ...] | None = None) -> tuple[str, ...]:
    """The devices whose peak memory under `tg`'s strategy (`peak`: computed if None)
    exceeds what they hold, by name."""
    peak = tuple(tg.memory_per_device()) if peak is None else peak
    devices = tg.machine.devices
    return tuple(d.name for d, need in zip(devices, peak, strict=True) if need > d.memory_bytes)


def memory_note(over: tuple[str, ...]) -> str:
    """'' when no device is `over` its memory, else which are and what to change."""
    if not over:
        return ""
    shown = ", ".join(over[:4]) + (" ..." if len(over) > 4 else "")
    return (
        f"the peak memory exceeds the memory of {len(over)} device(s) ({shown}): "
        "this strategy would not fit; use a smaller --batch-size or split the model further"
    )
