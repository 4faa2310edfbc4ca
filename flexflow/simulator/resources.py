"""The simulator's resources (paper §5.1: a task holds its device, a transfer every link of
its route): the sets of devices and links tasks hold, numbered for the C event loop, and each
pair of devices' route as the C block builders read it.
"""

from __future__ import annotations

from array import array

from flexflow.machine import Machine
from flexflow.simulator.keys import DEVICE_TASK
from flexflow.simulator.native_blocks import Routes


class ResourceSets:
    """The distinct sets of resources tasks hold, numbered, in arrays the C event loop reads.

    A task stores one id instead of a tuple, so the C side sees every task's devices and links
    without per-call conversion. Set d is device d alone; `empty` (num_devices) is no resource
    (barriers); routes are added as they are first used. Set s holds
    members[offsets[s]:offsets[s + 1]].
    """

    def __init__(self, num_devices: int) -> None:
        self.sets: list[tuple[int, ...]] = []
        self.offsets = array("i", [0])
        self.members = array("i")
        self._ids: dict[tuple[int, ...], int] = {}
        for device in range(num_devices):
            self.intern((device,))
        self.empty = self.intern(())

    def intern(self, resources: tuple[int, ...]) -> int:
        found = self._ids.get(resources)
        if found is None:
            found = self._ids[resources] = len(self.sets)
            self.sets.append(resources)
            self.members.extend(resources)
            self.offsets.append(len(self.members))
        return found


class RouteTables:
    """`SimContext`'s routes: each pair of devices' links, latency and bandwidth, made once."""

    # what SimContext sets (flexflow/simulator/context.py), with the caches _routes,
    # _route_tables and _routes_view
    machine: Machine
    num_devices: int
    resource_sets: ResourceSets

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], float, float]:
        """(resource ids of the route's links, total latency, bottleneck bandwidth)."""
        found = self._routes.get((src, dst))
        if found is None:
            links = self.machine.route(src, dst)
            found = (
                tuple(self.num_devices + link.id for link in links),
                sum(link.latency_s for link in links),
                min(link.bandwidth_bytes_per_s for link in links),
            )
            self._routes[(src, dst)] = found
        return found

    def transfer(self, src: int, dst: int, size_bytes: float) -> tuple[tuple[int, ...], float]:
        """Resources and time of a transfer: it holds every link of its route (cut-through)."""
        res, latency, bandwidth = self.route(src, dst)
        return res, latency + size_bytes / bandwidth

    def route_tables(self) -> tuple[array, array, array, array]:
        """Every (src, dst) pair's route, at [src * num_devices + dst], as the C block builders
        read it: the id of its links in `resource_sets`, its latency and bandwidth, and the
        flag a transfer's order gets (`DEVICE_TASK` where the route holds a link); src == dst
        has no route (bandwidth 1, never read)."""
        if self._route_tables is None:
            sets, latency, bandwidth, flags = array("i"), array("d"), array("d"), array("Q")
            for src in range(self.num_devices):
                for dst in range(self.num_devices):
                    res, lat, bw = self.route(src, dst) if src != dst else ((), 0.0, 1.0)
                    sets.append(self.resource_sets.intern(res))
                    latency.append(lat)
                    bandwidth.append(bw)
                    flags.append(DEVICE_TASK if res else 0)
            self._route_tables = (sets, latency, bandwidth, flags)
        return self._route_tables

    def routes(self) -> Routes:
        """`route_tables` as the C block builders read them (made once)."""
        if self._routes_view is None:
            self._routes_view = Routes(self.route_tables(), self.num_devices)
        return self._routes_view
