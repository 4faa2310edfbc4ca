"""The machine of the paper (§5, device topology D): devices, the links between them, routes.

A `Machine` is an immutable description, never a handle on real hardware: the simulator prices
tasks on its devices and transfers on its links, only `flexflow.runtime` maps it onto Legate.

Links are directed: a full-duplex connection is two `Link`s, so opposite transfers never queue
behind each other. Endpoints that compute nothing (NVSwitch, PCIe switches, the host bridge, NICs,
the InfiniBand switch) are `switches`. A transfer goes from its source device through switches to
its destination device, never through a third device. `route` picks the path with the fewest
hops, then the largest bottleneck bandwidth, then the smallest link ids (compared hop by hop from
the source), so every run of the simulator sees the same paths.

Its parts (`Device`, `Link`) live in `flexflow.machine_parts`, the checks a machine passes when
built in `machine_checks`, the route search in `machine_routes` and its JSON file format in
`machine_file`. Presets (`p100:N`, `k80:N`, `dgx-h100:N`, `local`) live in
`flexflow.machine_presets`; `parse_machine` resolves a preset name or a machine file.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from flexflow.errors import MachineError
from flexflow.fileio import atomic_write_text, read_text
from flexflow.machine_checks import (
    MAX_DEVICES,
    connectivity_problems,
    structure_problems,
    too_many_devices,
)
from flexflow.machine_file import machine_from_json, machine_json, machine_to_json
from flexflow.machine_parts import Device, Link
from flexflow.machine_routes import routes_from


@dataclass(frozen=True)
class Machine:
    """The device topology D: devices, switches and directed links, validated when built."""

    name: str
    devices: tuple[Device, ...]
    switches: tuple[str, ...]
    links: tuple[Link, ...]

    def __post_init__(self) -> None:
        for key in ("devices", "switches", "links"):
            if isinstance(getattr(self, key), list):
                object.__setattr__(self, key, tuple(getattr(self, key)))
        problems = structure_problems(self)
        if not problems:  # routes can only be searched once every endpoint is known
            problems = connectivity_problems(self)
        if problems:
            numbered = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
            raise MachineError(
                f"machine {self.name!r} is invalid, {len(problems)} problem(s): {numbered}; "
                "fix the machine description (`flexflow machines --json` prints valid examples)."
            )

    # ---- devices ---------------------------------------------------------------------------

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def kind_ordinals(self) -> tuple[tuple[str, int], ...]:
        """For each device id, its kind and its index among the devices of that kind: the
        Legate processor a strategy's device runs on (device 3 of a 2-CPU, 4-GPU node is
        ("gpu", 1))."""
        seen: dict[str, int] = {}
        ordinals = []
        for device in self.devices:
            ordinals.append((device.kind, seen.get(device.kind, 0)))
            seen[device.kind] = ordinals[-1][1] + 1
        return tuple(ordinals)

    @cached_property
    def num_nodes(self) -> int:
        return len({d.node for d in self.devices})

    def device(self, device_id: int) -> Device:
        if isinstance(device_id, int) and 0 <= device_id < len(self.devices):
            return self.devices[device_id]
        last = len(self.devices) - 1
        raise MachineError(
            f"machine {self.name!r} has no device {device_id!r} "
            f"(devices 0-{last}); use a device id from 0 to {last}."
        )

    def most_cpus_on_a_node(self) -> int:
        """The most CPU devices one node has (0 without CPUs): the processors that can run at
        once in one process, as the profiler and the simulator's runtime cost count them."""
        counts = Counter(d.node for d in self.devices if d.kind == "cpu")
        return max(counts.values(), default=0)

    def devices_on_node(self, node: int) -> tuple[Device, ...]:
        found = tuple(d for d in self.devices if d.node == node)
        if not found:
            raise MachineError(
                f"machine {self.name!r} has no node {node!r} (nodes 0-{self.num_nodes - 1}); "
                f"use a node from 0 to {self.num_nodes - 1}."
            )
        return found

    # ---- routes ----------------------------------------------------------------------------

    def route(self, src_device_id: int, dst_device_id: int) -> tuple[Link, ...]:
        """The links a transfer from one device to another crosses, in order; () for src == dst."""
        src, dst = self.device(src_device_id), self.device(dst_device_id)
        if src.id == dst.id:
            return ()
        routes = self._route_cache.get(src.id)
        if routes is None:
            routes = self._route_cache[src.id] = routes_from(self, src.id)
        return routes[dst.id]

    def transfer_s(self, src_device_id: int, dst_device_id: int, size_bytes: float) -> float:
        """Uncontended time to move `size_bytes` along `route`: latencies plus size / bottleneck."""
        path = self.route(src_device_id, dst_device_id)
        if not path:
            return 0.0
        bottleneck = min(link.bandwidth_bytes_per_s for link in path)
        return sum(link.latency_s for link in path) + size_bytes / bottleneck

    @cached_property
    def _route_cache(self) -> dict[int, tuple[tuple[Link, ...], ...]]:
        return {}  # source device id -> route to every device, filled one source at a time

    @cached_property
    def links_out(self) -> dict[str, tuple[Link, ...]]:
        """Each endpoint's outgoing links (the routes' and the connectivity check's graph)."""
        out: dict[str, list[Link]] = {name: [] for name in self.endpoint_names}
        for link in self.links:
            out[link.src].append(link)
        return {name: tuple(links) for name, links in out.items()}

    @property
    def endpoint_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices) + self.switches

    # ---- files -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return machine_to_json(self)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    def save(self, path: str | os.PathLike[str]) -> Path:
        return atomic_write_text(path, self.dumps() + "\n")

    @classmethod
    def from_json(cls, data: Any, source: str = "machine JSON") -> Machine:
        """Rebuild a machine from `to_json` output; one MachineError names every problem found."""
        return machine_from_json(cls, data, source)

    @classmethod
    def loads(cls, text: str, source: str = "machine JSON") -> Machine:
        return cls.from_json(machine_json(text, source), source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Machine:
        text = read_text(path, "machine file", MachineError)
        return cls.loads(text, f"machine file {str(path)!r}")

    # ---- text ------------------------------------------------------------------------------

    def describe(self) -> str:
        """A few lines: devices by model, links by kind and speed."""
        lines = [
            f"machine {self.name}: {self.num_devices} devices on {self.num_nodes} node(s), "
            f"{len(self.switches)} switches, {len(self.links)} links"
        ]
        for (kind, model), count in Counter((d.kind, d.model) for d in self.devices).items():
            d = next(d for d in self.devices if (d.kind, d.model) == (kind, model))
            lines.append(
                f"  {count} x {kind} {model}: {d.peak_flops / 1e12:.3g} TFLOP/s FP32, "
                f"{d.memory_bandwidth_bytes_per_s / 1e9:.4g} GB/s, {d.memory_bytes / 2**30:.3g} GiB"
            )
        for (kind, bandwidth, latency), count in link_groups(self.links).items():
            lines.append(
                f"  {count} x {kind} link: {bandwidth / 1e9:.4g} GB/s per direction, "
                f"{latency * 1e6:.3g} us"
            )
        return "\n".join(lines)


def link_groups(links: Iterable[Link]) -> dict[tuple[str, float, float], int]:
    """Link counts by (kind, bandwidth, latency), in order of first appearance."""
    return dict(Counter((link.kind, link.bandwidth_bytes_per_s, link.latency_s) for link in links))


def parse_machine(spec: str) -> Machine:
    """A preset (`p100:N`, `k80:N`, `dgx-h100:N`, `dgx-h200:N`, `local`) or a machine JSON file."""
    from flexflow.machine_presets import NODE_PRESETS, PRESET_HELP, local_machine

    name, colon, count = spec.partition(":")
    if spec == "local":
        return local_machine()
    if name in NODE_PRESETS and colon:
        if not (count.isascii() and count.isdigit()) or int(count) < 1:
            raise MachineError(
                f"machine {spec!r}: the node count must be an integer >= 1, got {count!r}; "
                f"write e.g. '{name}:2'."
            )
        if int(count) > MAX_DEVICES:  # every node has a device: too many, before building
            raise MachineError(f"machine {spec!r}: {too_many_devices(int(count), at_least=True)}.")
        return NODE_PRESETS[name].build(int(count))
    if Path(spec).exists():
        return Machine.load(spec)
    if name in NODE_PRESETS:
        raise MachineError(f"machine {spec!r} needs a node count; write '{name}:1' for one node.")
    raise MachineError(
        f"unknown machine {spec!r} (no preset of that name and no such file); "
        f"use one of {PRESET_HELP} or the path of a machine JSON file."
    )
