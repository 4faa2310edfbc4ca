"""The checks a `Machine` passes when built (paper §5's device topology D): its size, the
numbering and names of its parts, one kind and speed per device model, and a route between
every two devices through switches only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from flexflow.machine_parts import Device, Link

if TYPE_CHECKING:
    from flexflow.machine import Machine


def _duplicates(names: Iterable[str]) -> list[str]:
    return sorted(name for name, count in Counter(names).items() if count > 1)


MAX_DEVICES = 1024
"""The most devices a machine may have: the simulator keeps a route for every pair of devices
(p100:256, 1,024 GPUs, simulates LeNet in about 11 s and 730 MB; 4,096 GPUs needed more than
6 GB and minutes before its first task)."""


def too_many_devices(devices: int, at_least: bool = False) -> str:
    """Why a machine of `devices` devices (`at_least`: or more) is refused."""
    return (
        f"it has {devices:,}{' or more' if at_least else ''} devices; flexflow simulates machines of at most {MAX_DEVICES:,} "
        "(it keeps a route for every pair of devices): plan on a slice of the cluster, whose "
        "strategy repeats across the rest under data parallelism"
    )


def structure_problems(machine: Machine) -> list[str]:
    problems: list[str] = []
    if not isinstance(machine.name, str) or not machine.name:
        problems.append(f"name must be a non-empty string, got {machine.name!r}")
    for key, cls in (("devices", Device), ("switches", str), ("links", Link)):
        values = getattr(machine, key)
        if not isinstance(values, tuple) or not all(isinstance(v, cls) for v in values):
            problems.append(f"{key} must be a tuple of {cls.__name__}, got {values!r:.80}")
    if problems:
        return problems
    if not machine.devices:
        problems.append("it has no devices; add at least one")
    if len(machine.devices) > MAX_DEVICES:
        return [too_many_devices(len(machine.devices))]
    for position, device in enumerate(machine.devices):
        if device.id != position:
            problems.append(f"device {device.name!r} at position {position} has id {device.id}")
    for position, link in enumerate(machine.links):
        if link.id != position:
            problems.append(f"link {link.name!r} at position {position} has id {link.id}")
    nodes = sorted({d.node for d in machine.devices})
    if nodes != list(range(len(nodes))):
        problems.append(f"device nodes must be numbered 0-{len(nodes) - 1}, got {nodes}")
    for name in _duplicates(machine.endpoint_names):
        problems.append(f"the name {name!r} is used by more than one device or switch")
    for name in _duplicates(link.name for link in machine.links):
        problems.append(f"the link name {name!r} is used more than once")
    problems += _model_problems(machine.devices)
    endpoints = set(machine.endpoint_names)
    for link in machine.links:
        for end in ("src", "dst"):
            if getattr(link, end) not in endpoints:
                problems.append(
                    f"link {link.id} {link.name!r} has unknown {end} {getattr(link, end)!r} "
                    "(neither a device nor a switch)"
                )
    return problems


_MODEL_SPECS = ("kind", "peak_flops", "memory_bandwidth_bytes_per_s")
"""What devices of one model share: tasks are priced, and profiles measured, per model."""


def _model_problems(devices: Iterable[Device]) -> list[str]:
    """Devices of one model name whose kind or speeds differ (each run priced them all as
    the first one the cost model met: results depended on the devices' order)."""
    first: dict[str, Device] = {}
    problems = []
    for device in devices:
        seen = first.setdefault(device.model, device)
        differ = [spec for spec in _MODEL_SPECS if getattr(device, spec) != getattr(seen, spec)]
        if differ:
            problems.append(
                f"devices {seen.name!r} and {device.name!r} are both model {device.model!r} "
                f"but differ in {', '.join(differ)}; a model names one kind of device (tasks "
                "are priced and profiled per model): give them different model names"
            )
            first[device.model] = device  # one problem per pair of differing groups
    return problems


def connectivity_problems(machine: Machine) -> list[str]:
    """Every device must reach every other one through switches only."""
    devices = {d.name for d in machine.devices}
    out = machine.links_out
    problems = []
    for device in machine.devices:
        seen = {device.name}
        frontier = [device.name]
        while frontier:
            step = []
            for name in frontier:
                for link in out[name]:
                    if link.dst not in seen:
                        seen.add(link.dst)
                        if link.dst not in devices:
                            step.append(link.dst)
            frontier = step
        missing = [d.name for d in machine.devices if d.name not in seen]
        if missing:
            unreached = ", ".join(missing[:4]) + (
                f" and {len(missing) - 4} more" if len(missing) > 4 else ""
            )
            problems.append(
                f"device {device.name!r} has no route to {unreached} (a transfer passes through "
                "switches only, never through another device: link them directly or through "
                "a switch)"
            )
    return problems
