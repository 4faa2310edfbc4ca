"""The simulator's C parts in plain Python, as their specification: the event loop of Algorithm 1
(paper §5, native/simulator.c), the tile overlaps of task-graph edges (native/overlaps.c), and
the op, edge and synchronization blocks of a task graph (native/blocks.c).

Nothing runs them at simulation time; tests/simulator/test_native.py checks that the C code
gives bit-identical ready, start and end times and equal overlaps, on random inputs and on
real task graphs.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence

from flexflow.cost import DEVICE_CONSTANTS
from flexflow.fusion import cpu_devices, joins_previous
from flexflow.ops.base import Region, region_volume
from flexflow.simulator.keys import (
    BWD_KEY,
    DEVICE_TASK,
    FWD_KEY,
    GATHER_KEY,
    GRAD_XFER_KEY,
    REDUCED_KEY,
    RING_KEY,
    UPDATE_KEY,
    XFER_KEY,
    task_key,
)
from flexflow.simulator.taskgraph import TaskGraph

Entry = tuple[float, int, int]  # (ready_time, order: device-task flag and canonical key, task id)


def reference_run(
    exe: Sequence[float],
    res: Sequence[tuple[int, ...]],
    preds: Sequence[list[int]],
    succs: Sequence[list[int]],
    order: Sequence[int],
    tasks: list[int],
    free: list[float],
    times: tuple[list[float], list[float], list[float]],
) -> None:
    """Simulate `tasks`, whose other predecessors have already ended, into `times` (ready, start, end).

    `free` holds the time each device and link becomes free; each task runs on all its
    resources as soon as it is ready and they are free, in (ready_time, key) order.
    """
    ready, start, end = times
    member = set(tasks)
    remaining = {}
    heap: list[Entry] = []
    for t in tasks:
        r = 0.0
        waiting = 0
        for p in preds[t]:
            if p in member:
                waiting += 1
            elif end[p] > r:
                r = end[p]
        ready[t] = r
        if waiting:
            remaining[t] = waiting
        else:
            heap.append((r, order[t], t))
    heapq.heapify(heap)
    while heap:
        r, _, t = heapq.heappop(heap)
        s = r
        for x in res[t]:
            if free[x] > s:
                s = free[x]
        e = s + exe[t]
        for x in res[t]:
            free[x] = e
        start[t] = s
        end[t] = e
        for u in succs[t]:
            if e > ready[u]:
                ready[u] = e
            left = remaining[u] - 1
            if left:
                remaining[u] = left
            else:
                del remaining[u]
                heapq.heappush(heap, (ready[u], order[u], u))
    if remaining:
        raise AssertionError(
            f"{len(remaining)} tasks never became ready: the task graph has a cycle"
        )


def reference_simulate(tg: TaskGraph) -> tuple[list[float], list[float], list[float]]:
    """Algorithm 1 over every live task of `tg`: (ready, start, end) per task id."""
    n = tg.size
    times = ([0.0] * n, [0.0] * n, [0.0] * n)
    tasks = list(tg.live_tasks())
    free = [0.0] * tg.num_resources
    reference_run(tg.exe, tg.res, tg.predecessors(), tg.successors(), tg.order, tasks, free, times)
    return times


def reference_grid_overlaps(
    need: Region, steps: list[int], strides: list[int], grid: tuple[int, ...]
) -> list[tuple[int, int]]:
    """(producer task, overlap volume) for every grid tile meeting region `need`, by index arithmetic."""
    per_dim: list[list[tuple[int, int]]] = []
    for (lo, hi), step, deg in zip(need, steps, grid, strict=True):
        if hi <= lo:
            return []
        hits = []
        for c in range(lo // step, min((hi - 1) // step, deg - 1) + 1):
            a, b = max(lo, c * step), min(hi, (c + 1) * step)
            if b > a:
                hits.append((c, b - a))
        per_dim.append(hits)
    return [
        (
            sum(c * s for (c, _), s in zip(combo, strides, strict=True)),
            math.prod(n for _, n in combo),
        )
        for combo in itertools.product(*per_dim)
    ]


EdgeTask = tuple[float, int, int, int, int]  # (exe, resource set, bytes, source, destination)


def reference_op_block(tg: TaskGraph, op: int) -> tuple[dict[int, EdgeTask], set[tuple[int, int]]]:
    """What the op block of `op` holds (native/blocks.c), as `reference_edge_block` gives an
    edge block: per task of its configuration, a forward and a backward task on its device,
    timed by the cost model plus the statistics all-reduce they wait for (less the launch
    where the op runs inside the previous op's task, or the launch is the runtime's), and the
    backward's dependency on the forward; in a step run as one C call per device
    (`TaskGraph.native`), timed as the profile measured them there, nothing added."""
    context, config = tg.context, tg.configs[op]

    def times(on) -> tuple[float, float]:
        if tg.native:
            time = context.native_time(op, config.degrees, on)
            return time.forward_s, time.backward_s
        time = context.task_time(op, config.degrees, on)
        cut = DEVICE_CONSTANTS[on.kind].launch_overhead_s if fused or context.serial_launches else 0
        return max(0.0, time.forward_s - cut) + stats_s, max(0.0, time.backward_s - cut) + stats_s

    stats_s = context.statistics_s(op, config)
    fused = context.fused_launches and joins_previous(
        tg.graph, tg.configs, [context.regions(o, c.degrees) for o, c in enumerate(tg.configs)],
        op, cpu_devices([device.kind for device in tg.machine.devices]),
    )  # fmt: skip
    tasks: dict[int, EdgeTask] = {}
    edges: set[tuple[int, int]] = set()
    for k, device in enumerate(config.devices):
        forward_s, backward_s = times(tg.machine.devices[device])
        forward = task_key(FWD_KEY, op, k) | DEVICE_TASK
        backward = task_key(BWD_KEY, op, k) | DEVICE_TASK
        tasks[forward] = (forward_s, device, 0, -1, -1)
        tasks[backward] = (backward_s, device, 0, -1, -1)
        edges.add((forward, backward))
    return tasks, edges


def reference_edge_block(
    tg: TaskGraph, consumer: int, j: int
) -> tuple[dict[int, EdgeTask], set[tuple[int, int]]]:
    """What the edge block of input `j` of `consumer` holds (native/blocks.c): its tasks by order
    (key and device-task flag) and its edges as (order, order) pairs, from `tg`'s configurations
    and op tasks. Every producer tile overlapping a consumer tile's input region gives, on one
    device, a dependency forward and one backward; across devices a transfer, and for a float
    tensor the gradient's transfer back (else a backward dependency)."""
    context, graph = tg.context, tg.graph
    node = graph.ops[consumer]
    tensor = graph.tensor(node.inputs[j])
    tasks: dict[int, EdgeTask] = {}
    edges: set[tuple[int, int]] = set()
    if tensor.producer is None:
        return tasks, edges
    p_config, c_config = tg.configs[tensor.producer], tg.configs[consumer]
    order = tg.order
    p_fwd = [order[t] for t in tg.fwd[tensor.producer]]
    p_bwd = [order[t] for t in tg.bwd[tensor.producer]]
    c_fwd, c_bwd = [order[t] for t in tg.fwd[consumer]], [order[t] for t in tg.bwd[consumer]]
    for kc, kp, volume in context.overlaps(consumer, j, p_config.degrees, c_config.degrees):
        p_dev, c_dev = p_config.devices[kp], c_config.devices[kc]
        if p_dev == c_dev:
            edges |= {(p_fwd[kp], c_fwd[kc]), (c_bwd[kc], p_bwd[kp])}
            continue
        size = volume * tensor.spec.dtype.itemsize
        x = _transfer(context, task_key(XFER_KEY, consumer, j, kc, kp), p_dev, c_dev, size)
        tasks[x[0]] = x[1]
        edges |= {(p_fwd[kp], x[0]), (x[0], c_fwd[kc])}
        if tensor.spec.dtype.is_float:
            y = _transfer(context, task_key(GRAD_XFER_KEY, consumer, j, kc, kp), c_dev, p_dev, size)
            tasks[y[0]] = y[1]
            edges |= {(c_bwd[kc], y[0]), (y[0], p_bwd[kp])}
        else:
            edges.add((c_bwd[kc], p_bwd[kp]))
    return tasks, edges


def _transfer(context, key: int, src: int, dst: int, size: int) -> tuple[int, EdgeTask]:
    """A transfer's order (its key, flagged if its route holds a link) and values."""
    res, latency, bandwidth = context.route(src, dst)
    order = key | (DEVICE_TASK if res else 0)
    return order, (latency + size / bandwidth, context.resource_sets.intern(res), size, src, dst)


def reference_sync_block(
    tg: TaskGraph, pid: int
) -> tuple[dict[int, EdgeTask], set[tuple[int, int]]]:
    """What the sync block of parameter `pid` holds (native/blocks.c), as `reference_edge_block`
    gives an edge block. The tasks of all ops using the parameter, grouped by the weight region
    they read: a group on several devices all-reduces its gradient around a ring of them
    (2(r-1)/r of the region's bytes over each hop; a gather barrier after its backward tasks
    and a done barrier after the ring), then every holder updates its copy."""
    context, order = tg.context, tg.order
    groups: dict = {}
    for op in tg.parameter_users(pid):
        for region, devices, tasks in context.op_sync_groups(op, pid, tg.configs[op]):
            found, backward = groups.setdefault(region, (set(), []))
            found.update(devices)
            backward += [order[tg.bwd[op][k]] for k in tasks]
    tasks: dict[int, EdgeTask] = {}
    edges: set[tuple[int, int]] = set()
    for g, (region, (devices, backward)) in enumerate(sorted(groups.items())):
        holders, elements = sorted(devices), region_volume(region)
        after = backward
        if len(holders) > 1:
            r, empty = len(holders), context.resource_sets.empty
            size = int(2 * (r - 1) / r * elements * 4)
            gather, done = task_key(GATHER_KEY, pid, g), task_key(REDUCED_KEY, pid, g)
            tasks[gather] = tasks[done] = (0.0, empty, 0, -1, -1)
            edges |= {(t, gather) for t in backward}
            for i, src in enumerate(holders):
                x = _transfer(
                    context, task_key(RING_KEY, pid, g, i), src, holders[(i + 1) % r], size
                )
                tasks[x[0]] = x[1]
                edges |= {(gather, x[0]), (x[0], done)}
            after = [done]
        for d in holders:
            u = task_key(UPDATE_KEY, pid, g, d) | DEVICE_TASK  # on device d alone
            tasks[u] = (context.update_time(elements, tg.machine.devices[d]), d, 0, -1, -1)
            edges |= {(t, u) for t in after}
    return tasks, edges
