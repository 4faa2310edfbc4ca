"""An admissible lower bound on the iteration time of every completion of a partial strategy (§8.4).

Exhaustive search assigns ops in topological order (the graph's op order) and cuts a subtree
when this bound reaches the best cost found. The bound never exceeds the simulated time of any
completion because every part of it holds for EVERY feasible schedule of the task graph (tasks
start after their predecessors end; a device or link runs one task at a time), not just the
simulator's list schedule, which can be longer than optimal but never shorter. Simulating a
partial task graph would NOT do: list scheduling is not monotone (removing tasks can make a
schedule longer).

Chains. For each op and configuration, lower bounds on times every task or some task reaches:
    A   every forward task has ended         A(c)  >= fwd(c);  A(c) >= A(p) + Tf(p, c)
    Qb  every backward task's tail           Qb(c) >= updates after it;  Qb(c) >= Tb(p, c) + Qb(p)
    B   some backward task has ended         B(p)  >= A(p) + bwd(p);  B(p) >= B(c) + Tb(p, c)
    Hb  every backward task has started      Hb(p) >= A(p);  Hb(p) >= Hb(c) + bwd(c) + Sb(p, c)
    Qf  every forward task's tail            Qf(p) >= bwd(p) + Qb(p);  Qf(p) >= Sf(p, c) + Qf(c)
where a tail is time that must still pass after the task ends, and for an edge p -> c, with
x(kp, kc) and y(kp, kc) the transfer of the overlap of producer task kp and consumer task kc
(0 on one device) and of its gradient:
    Tf = min over kc of (max over the kp it reads of x) + fwd(c, kc)
    Tb = min over kc of  max over the kp it reads of (y + bwd(p, kp))
    Sf = min over kp of  max over the kc reading it of (x + fwd(c, kc))
    Sb = min over kp of  max over the kc reading it of y
Tf and Tb give no term when some consumer task reads nothing of the producer (it has no
predecessor there), Sf and Sb when some producer task is read by no consumer task. The tail
after a backward task is its parameters' updates on its device, each after its all-reduce ring,
scheduled in release order (exact for one machine with release times). Every completion lasts
at least B(o) + Qb(o) for every op o.

Devices and links. A device runs its tasks one at a time, so for any set S of tasks on it the
iteration lasts at least min over S of the start bound + their summed times + min over S of
the tail (taken over the sets of forward, backward and update tasks of each assigned op whose
start bound, resp. tail, passes a threshold). Unassigned ops add at least their least total
work somewhere; spread as evenly as possible (water filling) it raises the busiest device to
at least the water level. A transfer holds every link of its route, so the iteration lasts at
least the summed transfers on any link between assigned ops and their rings.

For an unassigned op every term is minimized over its configurations, independently of its
neighbours' terms: a relaxation of the true configuration, so still a lower bound. Task times
leave out the batch-norm statistics all-reduce (it only adds time); the parts mirror what
`flexflow.simulator.taskgraph` builds, and tests/search/test_exhaustive.py checks the bound
against simulated random completions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import FlexFlowError
from flexflow.ops.base import region_volume
from flexflow.search.spaces import Space
from flexflow.simulator import SimContext
from flexflow.strategy import ParallelConfig

NO_TERM = -1e30  # an edge term that constrains nothing (finite, so inf + NO_TERM stays inf)
FORWARD_TABLES = 2  # Tf, Tb: the forward pass computes A and Qb from producers
BACKWARD_TABLES = 3  # Tb, Sb, Sf: the backward pass computes B, Hb and Qf from consumers


@dataclass(frozen=True, slots=True)
class _Op:
    """One op's tables over its configurations."""

    fwd_min: np.ndarray  # (C,) fastest forward task
    fwd_max: np.ndarray  # (C,) slowest forward task
    bwd_min: np.ndarray  # (C,) fastest backward task
    load_s: np.ndarray  # (3, C, D): forward, backward and update time on each device
    update_tail: np.ndarray  # (C,) least tail of a backward task: its updates after their rings
    ring_s: np.ndarray  # (C, L): all-reduce ring time on each link (unshared parameters)


@dataclass(frozen=True, slots=True)
class _Edge:
    """Producer p's output read by consumer c, tabulated over (p config, c config)."""

    producer: int
    consumer: int
    forward: np.ndarray  # (2, Cp, Cc): Tf, Tb
    backward: np.ndarray  # (3, Cp, Cc): Tb, Sb, Sf
    link_s: np.ndarray  # (Cp, Cc, L): transfer time on each link, both directions


@dataclass(frozen=True, slots=True)
class Prefix:
    """Ops 0..len(chosen)-1 assigned (config indices into their space) and what they fix."""

    chosen: tuple[int, ...]
    forward: tuple[np.ndarray, ...]  # per assigned op: (2, 1, 1) of A and Qb
    link_s: np.ndarray  # (L,) busy time of each link so far


@dataclass(frozen=True, slots=True)
class Children:
    """The bound of each configuration of the next op, and what extending to it fixes."""

    bounds: np.ndarray  # (K,)
    forward: np.ndarray  # (2, K, 1): A and Qb of the op
    link_s: np.ndarray  # (K, L)


MAX_EDGE_PAIRS = 250_000
"""Most (producer, consumer) configuration pairs the bound tabulates over all edges, before any
budget applies: about 0.2 ms each (a Python loop over the pair's transfers), so at most about
a minute. LeNet has 2,831 pairs on `p100:1` (its space: 5.6e9 strategies), 50,650 on `p100:2`
(3 s of tables), 0.9 million on `k80:4` (170 s of tables for a space of 3.2e18 strategies,
which no search proves optimal) and 186 million on `k80:16` (over 200 GiB for one edge's table)."""


def check_tabulable(context: SimContext, configs: Sequence[Sequence[ParallelConfig]]) -> None:
    """Refuse, with what to do instead, a space too large for the bound's tables."""
    graph, machine = context.graph, context.machine
    for o, op_configs in enumerate(configs):
        if not op_configs:
            raise FlexFlowError(
                f"op '{graph.ops[o].name}' has no configuration in the search space; "
                "use a space that gives every op at least one."
            )
    pairs, largest = 0, (0, "")
    for node in graph.ops:
        for tid in node.inputs:
            producer = graph.tensor(tid).producer
            if producer is not None:
                count = len(configs[producer]) * len(configs[node.id])
                pairs += count
                largest = max(largest, (count, f"{graph.ops[producer].name} -> {node.name}"))
    if pairs > MAX_EDGE_PAIRS:
        sizes = [len(c) for c in configs]
        table_gib = pairs * (4 + len(machine.links)) * 8 / 2**30
        raise FlexFlowError(
            f"exhaustive search: this space is too large on {machine.name} "
            f"({machine.num_devices} devices): its ops have {min(sizes):,}-{max(sizes):,} "
            f"configurations each, about 10^{sum(map(math.log10, sizes)):.1f} strategies, "
            f"and its edges "
            f"{pairs:,} configuration pairs to tabulate (the limit is {MAX_EDGE_PAIRS:,}: "
            f"{table_gib:,.1f} GiB of tables, the largest for the edge {largest[1]}). "
            "Exhaustive search proves "
            "optima of small spaces (LeNet on p100:1); search this one with MCMC: "
            f"`flexflow search MODEL --machine {machine.name} --budget SECONDS`."
        )


class LowerBound:
    """Tables of the bound for one (context, space); `children` bounds every way to extend a prefix."""

    def __init__(self, context: SimContext, space: Space) -> None:
        self.context = context
        graph, machine = context.graph, context.machine
        self.num_ops = len(graph.ops)
        self.num_devices, self.num_links = machine.num_devices, len(machine.links)
        self.configs: list[tuple[ParallelConfig, ...]] = [space(o) for o in range(self.num_ops)]
        check_tabulable(context, self.configs)
        users: dict[int, int] = {}
        for node in graph.ops:
            for pid in dict.fromkeys(node.weights):
                users[pid] = users.get(pid, 0) + 1
        self._unshared = {pid for pid, n in users.items() if n == 1}
        self.ops = [self._tabulate_op(o) for o in range(self.num_ops)]
        work = [float(op.load_s.sum(axis=(0, 2)).min()) for op in self.ops]
        # least work the ops from i on must still add: rest_work[i] = sum(work[i:])
        self.rest_work = [float(sum(work[i:])) for i in range(self.num_ops + 1)]
        self.inputs: list[list[_Edge]] = [[] for _ in range(self.num_ops)]
        self.outputs: list[list[_Edge]] = [[] for _ in range(self.num_ops)]
        for node in graph.ops:
            for j, tid in enumerate(node.inputs):
                producer = graph.tensor(tid).producer
                if producer is None:
                    continue  # model inputs are resident wherever their consumers run
                if producer >= node.id:
                    raise AssertionError("graph ops are not in topological order")
                edge = self._tabulate_edge(producer, node.id, j)
                self.inputs[node.id].append(edge)
                self.outputs[producer].append(edge)

    # ---- tables --------------------------------------------------------------------------------
    def _times(self, o: int, config: ParallelConfig) -> list[tuple[float, float]]:
        """(forward, backward) time of each task of op `o` under `config`."""
        devices = self.context.machine.devices
        times = (self.context.task_time(o, config.degrees, devices[d]) for d in config.devices)
        return [(t.forward_s, t.backward_s) for t in times]

    def _tabulate_op(self, o: int) -> _Op:
        node = self.context.graph.ops[o]
        configs = self.configs[o]
        c = len(configs)
        fwd_min, fwd_max, bwd_min = np.empty(c), np.empty(c), np.empty(c)
        load_s = np.zeros((3, c, self.num_devices))
        update_tail = np.zeros(c)
        ring_s = np.zeros((c, self.num_links))
        for i, config in enumerate(configs):
            times = self._times(o, config)
            fwd_min[i] = min(f for f, _ in times)
            fwd_max[i] = max(f for f, _ in times)
            bwd_min[i] = min(b for _, b in times)
            for d, (f, b) in zip(config.devices, times, strict=True):
                load_s[0, i, d] += f
                load_s[1, i, d] += b
            # per task, the (ring, update) of each of its parameters' groups
            after: list[list[tuple[float, float]]] = [[] for _ in config.devices]
            for w, pid in enumerate(node.weights):
                if pid not in node.weights[:w]:
                    self._sync(o, config, w, pid, load_s[2, i], ring_s[i], after)
            if node.weights:
                update_tail[i] = min(_release_order_makespan(jobs) for jobs in after)
        return _Op(fwd_min, fwd_max, bwd_min, load_s, update_tail, ring_s)

    def _sync(
        self,
        o: int,
        config: ParallelConfig,
        w: int,
        pid: int,
        update_s: np.ndarray,
        ring_s: np.ndarray,
        after: list[list[tuple[float, float]]],
    ) -> None:
        """Weight `w` of op `o` synchronized as `TaskGraph._build_sync` does: each task's
        (ring, update) after it into `after`; updates into `update_s` and the ring into
        `ring_s` if no other op uses the parameter."""
        context, machine = self.context, self.context.machine
        groups: dict = {}
        for k, regions in enumerate(context.weight_regions(o, config.degrees)):
            groups.setdefault(regions[w], []).append(k)
        unshared = pid in self._unshared
        for region, tasks in groups.items():
            holders = sorted({config.devices[k] for k in tasks})
            elements = region_volume(region)
            update = {d: context.update_time(elements, machine.devices[d]) for d in holders}
            ring = 0.0  # other users of a shared parameter change its ring: count none
            if unshared:
                for d, u in update.items():
                    update_s[d] += u
                r = len(holders)
                size = int(2 * (r - 1) / r * elements * 4)
                for i, src in enumerate(holders if r > 1 else ()):
                    dst = holders[(i + 1) % r]
                    time = machine.transfer_s(src, dst, size)
                    ring = max(ring, time)  # every ring transfer ends before any update
                    for link in machine.route(src, dst):
                        ring_s[link.id] += time
            for k in tasks:
                after[k].append((ring, update[config.devices[k]]))

    def _tabulate_edge(self, p: int, c: int, j: int) -> _Edge:
        context, machine = self.context, self.context.machine
        tensor = context.graph.tensor(context.graph.ops[c].inputs[j])
        itemsize, grads = tensor.spec.dtype.itemsize, tensor.spec.dtype.is_float
        p_configs, c_configs = self.configs[p], self.configs[c]
        tf, tb, sb, sf = (np.empty((len(p_configs), len(c_configs))) for _ in range(4))
        link_s = np.zeros((len(p_configs), len(c_configs), self.num_links))
        p_times = [self._times(p, pc) for pc in p_configs]
        c_times = [self._times(c, cc) for cc in c_configs]
        for a, pc in enumerate(p_configs):
            for b, cc in enumerate(c_configs):
                # per consumer task, per producer task: worst (x + fwd(kc)) and y terms
                into_c = [[] for _ in range(cc.num_tasks)]  # (x, y + bwd(p, kp)) per kp read
                out_of_p = [[] for _ in range(pc.num_tasks)]  # (x + fwd(c, kc), y) per reader
                for kc, kp, volume in context.overlaps(c, j, pc.degrees, cc.degrees):
                    src, dst = pc.devices[kp], cc.devices[kc]
                    x = y = 0.0
                    if src != dst:
                        size = volume * itemsize
                        x = machine.transfer_s(src, dst, size)
                        for link in machine.route(src, dst):
                            link_s[a, b, link.id] += x
                        if grads:
                            y = machine.transfer_s(dst, src, size)
                            for link in machine.route(dst, src):
                                link_s[a, b, link.id] += y
                    into_c[kc].append((x, y + p_times[a][kp][1]))
                    out_of_p[kp].append((x + c_times[b][kc][0], y))
                if all(into_c):
                    tf[a, b] = min(
                        max(x for x, _ in reads) + c_times[b][kc][0]
                        for kc, reads in enumerate(into_c)
                    )
                    tb[a, b] = min(max(y for _, y in reads) for reads in into_c)
                else:  # a consumer task with no predecessor in p
                    tf[a, b] = tb[a, b] = NO_TERM
                if all(out_of_p):
                    sf[a, b] = min(max(x for x, _ in readers) for readers in out_of_p)
                    sb[a, b] = min(max(y for _, y in readers) for readers in out_of_p)
                else:  # a producer task no consumer task waits for
                    sf[a, b] = sb[a, b] = NO_TERM
        return _Edge(p, c, np.stack([tf, tb]), np.stack([tb, sb, sf]), link_s)

    # ---- the bound -------------------------------------------------------------------------------
    def root(self) -> Prefix:
        return Prefix((), (), np.zeros(self.num_links))

    def extend(self, prefix: Prefix, children: Children, k: int) -> Prefix:
        """The prefix with the next op given its k-th configuration."""
        return Prefix(
            prefix.chosen + (k,),
            prefix.forward + (children.forward[:, k : k + 1],),
            children.link_s[k],
        )

    def children(self, prefix: Prefix) -> Children:
        """The bound after giving op i = len(prefix.chosen) each of its configurations."""
        i, n = len(prefix.chosen), self.num_ops
        k = len(self.configs[i])
        # config indices of each op, broadcastable to (K, n): fixed, one per child, or all
        index = [np.array([[s]]) for s in prefix.chosen] + [np.arange(k)[:, None]]
        index += [np.arange(len(self.configs[o]))[None, :] for o in range(i + 1, n)]
        ops = self.ops
        # forward pass: A and Qb, from producers
        forward = list(prefix.forward)
        for o in range(i, n):
            ix = index[o]
            state = np.stack(np.broadcast_arrays(ops[o].fwd_min[ix], ops[o].update_tail[ix]))
            for e in self.inputs[o]:
                ip = index[e.producer]
                table = e.forward[:, ip[:, :, None], ix[:, None, :]]
                state = np.maximum(state, (forward[e.producer][..., None] + table).min(axis=2))
            forward.append(state)
        # backward pass: B, Eb = Hb + bwd, Qf, from consumers; and the chain B + Qb
        backward: list[np.ndarray] = [np.empty(0)] * n
        heads: list[list[np.ndarray]] = [[] for _ in range(i + 1)]  # per assigned op: its
        tails: list[list[np.ndarray]] = [[] for _ in range(i + 1)]  # fwd, bwd and update tasks
        chain = np.zeros(k)
        for o in reversed(range(n)):
            ix = index[o]
            a, qb = forward[o]
            bwd = ops[o].bwd_min[ix]
            b, hb, qf = np.broadcast_arrays(a + bwd, a, bwd + qb)
            state = np.stack([b, hb, qf])
            for e in self.outputs[o]:
                ic = index[e.consumer]
                table = e.backward[:, ix[:, :, None], ic[:, None, :]]
                state = np.maximum(state, (backward[e.consumer][:, :, None, :] + table).min(axis=3))
            b, hb, qf = state
            backward[o] = np.stack([b, hb + bwd, qf])
            chain = np.maximum(chain, (b + qb).min(axis=1))
            if o <= i:
                fwd_head = np.maximum(a - ops[o].fwd_max[ix], 0.0)
                heads[o] = [fwd_head, hb, hb + bwd]
                tails[o] = [qf, qb, np.zeros_like(qb)]
        loads = [
            ops[o].load_s[:, prefix.chosen[o]][:, None] if o < i else ops[o].load_s
            for o in range(i + 1)
        ]  # each (3, K or 1, D)
        device_s = np.concatenate([np.broadcast_to(x, (3, k, self.num_devices)) for x in loads])
        heads_arr = np.concatenate([np.broadcast_to(h, (k, 1)) for hs in heads for h in hs], axis=1)
        tails_arr = np.concatenate([np.broadcast_to(t, (k, 1)) for ts in tails for t in ts], axis=1)
        device_s = np.moveaxis(device_s, 0, 1)  # (K, G, D)
        link_s = prefix.link_s + ops[i].ring_s  # (K, L)
        for e in self.inputs[i]:
            link_s = link_s + e.link_s[prefix.chosen[e.producer]]
        busiest = np.maximum.reduce(
            [
                _water_level(device_s.sum(axis=1), self.rest_work[i + 1]),
                _one_device(heads_arr, device_s, tails_arr),
                _one_device(tails_arr, device_s, heads_arr),
                link_s.max(axis=1, initial=0.0),
            ]
        )
        return Children(np.maximum(chain, busiest), forward[i], link_s)

    def of(self, chosen: Sequence[int]) -> float:
        """The bound of the partial strategy giving ops 0..len(chosen)-1 these config indices."""
        prefix = self.root()
        if not chosen:
            return float(self.children(prefix).bounds.min())
        for k in chosen[:-1]:
            prefix = self.extend(prefix, self.children(prefix), k)
        return float(self.children(prefix).bounds[chosen[-1]])


def _release_order_makespan(jobs: list[tuple[float, float]]) -> float:
    """Least time to run (release, duration) jobs one at a time: in release order (Jackson)."""
    end = 0.0
    for release, duration in sorted(jobs):
        end = max(end, release) + duration
    return end


def _one_device(head: np.ndarray, load: np.ndarray, tail: np.ndarray) -> np.ndarray:
    """Per row, max over thresholds h of: h + the load of the task groups with head >= h on
    one device + the least tail among them (heads and tails may be swapped: the bound is
    symmetric). head, tail: (K, G); load: (K, G, D) time of each group on each device."""
    order = np.argsort(-head, axis=1)
    head = np.take_along_axis(head, order, axis=1)[:, :, None]
    load = np.take_along_axis(load, order[:, :, None], axis=1)
    tail = np.take_along_axis(tail, order, axis=1)[:, :, None]
    total = np.cumsum(load, axis=1)  # groups with head >= this one's, on each device
    least_tail = np.minimum.accumulate(np.where(load > 0, tail, np.inf), axis=1)
    value = np.where(total > 0, head + total + least_tail, 0.0)
    return value.max(axis=(1, 2))


def _water_level(loads: np.ndarray, extra_s: float) -> np.ndarray:
    """Per row: the least possible busiest load after adding `extra_s` of work anywhere.

    Filling the m least loaded devices to a common level h costs m h - (their sum), so the
    level reached with `extra_s` is min over m of (extra_s + sum of the m smallest) / m.
    """
    ordered = np.sort(loads, axis=1)
    counts = np.arange(1, loads.shape[1] + 1)
    level = ((extra_s + np.cumsum(ordered, axis=1)) / counts).min(axis=1)
    return np.maximum(level, ordered[:, -1])
