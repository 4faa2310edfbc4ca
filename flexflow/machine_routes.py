"""Routes between the devices of a `Machine` (paper §5: a transfer holds every link on its
path): the fewest hops, then the widest bottleneck, then the smallest link ids, so every run of
the simulator sees the same paths.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from flexflow.machine_parts import Link

if TYPE_CHECKING:
    from flexflow.machine import Machine


def routes_from(machine: Machine, src_id: int) -> tuple[tuple[Link, ...], ...]:
    """The route from one device to every device (index = destination id), in one search.

    Breadth-first layers give the fewest hops. Each endpoint keeps the paths of its layer
    that no other beats on both counts (a bottleneck at least as wide and smaller link ids,
    compared hop by hop): the best route's first hops are such a path to the endpoint before
    it, since a path beating them would make a better route. The route to a device is then
    its widest kept path, ties going to the smallest link ids, exactly. An endpoint keeps a
    path per bottleneck at most (one or two on the presets), so a search costs the links a
    few times over, not once per distinct bandwidth of the machine (a 1,024-GPU star whose
    links all differ took 144 s to route).
    """
    out = machine.links_out
    devices = {d.name for d in machine.devices}
    src = machine.devices[src_id].name
    best: dict[str, list[tuple[float, tuple[int, ...]]]] = {src: [(math.inf, ())]}
    frontier = [src]
    while frontier:
        layer: dict[str, list[tuple[float, tuple[int, ...]]]] = {}
        for name in frontier:
            for link in out[name]:
                if link.dst in best:
                    continue
                reached = layer.setdefault(link.dst, [])
                for bottleneck, path in best[name]:
                    reached.append((min(bottleneck, link.bandwidth_bytes_per_s), (*path, link.id)))
        for name, paths in layer.items():
            layer[name] = _unbeaten(paths)
        best.update(layer)
        frontier = [name for name in layer if name not in devices]
    routes = []
    for device in machine.devices:
        ids = () if device.name == src else best[device.name][0][1]
        routes.append(tuple(machine.links[i] for i in ids))
    return tuple(routes)


def _unbeaten(
    paths: list[tuple[float, tuple[int, ...]]],
) -> list[tuple[float, tuple[int, ...]]]:
    """The (bottleneck, link ids) paths no other beats on both counts, widest first (the first
    is the route: the widest, the smallest ids among those)."""
    kept: list[tuple[float, tuple[int, ...]]] = []
    for bottleneck, path in sorted(paths, key=lambda entry: (-entry[0], entry[1])):
        if not kept or path < kept[-1][1]:
            kept.append((bottleneck, path))
    return kept
