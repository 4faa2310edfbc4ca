"""The OptCNN baseline (Jia et al., 2018; the paper's §8.2.3 comparison): per-op SAP parallelism by dynamic programming.

OptCNN's space: every op splits its output in the sample, attribute and parameter dimensions
(any degree tuple of `flexflow.space.degree_choices`) over the device block 0..n-1; there is no
placement choice (no Operation dimension). OptCNN's cost model is additive and assumes ops never
run concurrently:

    cost(S) = sum over ops     compute(op) + sync(op)
            + sum over edges   transfer(producer -> consumer)

- compute: forward + backward time of the op's slowest task (`SimContext.task_time`).
- transfer: the producer tiles that overlap a consumer tile on another device are sent
  (`SimContext.overlaps`), forward and, for float tensors, their gradients backward. The
  transfers of one direction run in parallel except where they share a link: their time is
  the largest load of one link (bytes / route bandwidth) plus the largest route latency.
- sync: the ring all-reduce of every weight region held by several devices, as
  `flexflow.simulator.taskgraph` builds it, plus the slowest device's weight updates. A
  parameter shared by k ops (an LSTM's weights over its time steps) is all-reduced once per
  iteration, so each user is charged 1/k of it: exact when all users choose one configuration.

Minimization is OptCNN's graph elimination, generalized to variable elimination on the operator
graph seen as undirected: an op with one neighbour folds into it (leaf), an op with two
neighbours becomes one edge between them (node elimination), parallel edges are summed (edge
elimination). Where elimination removes every op (chains, and series-parallel graphs such as
Inception modules and residual blocks) the minimum is exact; on a chain it is the plain DP over
the ops in topological order. Ops that cannot be eliminated (every remaining op has three or
more neighbours, e.g. the layer x time-step grid of an unrolled multi-layer LSTM) are assigned
by a HEURISTIC: a DP over them in topological order whose state is the op's configuration, where
an edge to an op other than the previous one is charged with the configuration that op already
has on the best path. The chosen strategy is then evaluated with the real simulator by callers.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from flexflow.ops.base import Region, region_volume
from flexflow.simulator import SimContext
from flexflow.space import degree_choices
from flexflow.strategy import ParallelConfig, Strategy

Transfer = tuple[int, int, float]  # (source device, destination device, bytes)


@dataclass(frozen=True, slots=True)
class OptCNNResult:
    strategy: Strategy
    cost_s: float  # OptCNN's additive cost of `strategy`
    exact: bool  # True when elimination removed every op: `cost_s` is the minimum of the space


def optcnn_configs(context: SimContext, op: int) -> tuple[ParallelConfig, ...]:
    """OptCNN's choices for `op`: every degree tuple, on devices 0..n-1."""
    sig = context.graph.ops[op].sig
    return tuple(
        ParallelConfig(degrees, tuple(range(math.prod(degrees))))
        for degrees in degree_choices(sig, context.num_devices)
    )


def parallel_transfer_s(context: SimContext, transfers: list[Transfer]) -> float:
    """Time of transfers started together: the busiest link's load plus the largest latency."""
    load: dict[int, float] = defaultdict(float)
    latency = 0.0
    for src, dst, size_bytes in transfers:
        links, latency_s, bandwidth = context.route(src, dst)
        for link in links:
            load[link] += size_bytes / bandwidth
        latency = max(latency, latency_s)
    return max(load.values(), default=0.0) + latency


def compute_s(context: SimContext, op: int, config: ParallelConfig) -> float:
    """Forward + backward time of the op's slowest task."""
    devices = context.machine.devices
    times = (context.task_time(op, config.degrees, devices[d]) for d in set(config.devices))
    return max(t.forward_s + t.backward_s for t in times)


def sync_s(context: SimContext, op: int, config: ParallelConfig, users: dict[int, int]) -> float:
    """The op's share of the all-reduce and update of its weights (see the module docstring)."""
    node = context.graph.ops[op]
    devices = context.machine.devices
    regions = context.weight_regions(op, config.degrees)
    total = 0.0
    for pid in dict.fromkeys(node.weights):
        w = node.weights.index(pid)
        holders: dict[Region, list[int]] = defaultdict(list)
        for k, tile in enumerate(regions):
            if config.devices[k] not in holders[tile[w]]:
                holders[tile[w]].append(config.devices[k])
        ring: list[Transfer] = []
        updates: dict[int, float] = defaultdict(float)
        for region, group in holders.items():
            elements = region_volume(region)
            r = len(group)
            if r > 1:  # 2(r-1)/r of the region over every hop of a ring of its holders
                group = sorted(group)
                size = 2 * (r - 1) / r * elements * 4
                ring += [(a, group[(i + 1) % r], size) for i, a in enumerate(group)]
            for d in group:
                updates[d] += context.update_time(elements, devices[d])
        total += (parallel_transfer_s(context, ring) + max(updates.values())) / users[pid]
    return total


def node_cost_s(
    context: SimContext, op: int, config: ParallelConfig, users: dict[int, int]
) -> float:
    return compute_s(context, op, config) + sync_s(context, op, config, users)


def edge_cost_s(
    context: SimContext, consumer: int, j: int, p_config: ParallelConfig, c_config: ParallelConfig
) -> float:
    """Forward transfers of input `j` of `consumer`, plus the backward transfers of their gradients."""
    tensor = context.graph.tensor(context.graph.ops[consumer].inputs[j])
    overlaps = context.overlaps(consumer, j, p_config.degrees, c_config.degrees)
    forward = [
        (p_config.devices[kp], c_config.devices[kc], volume * tensor.spec.dtype.itemsize)
        for kc, kp, volume in overlaps
        if p_config.devices[kp] != c_config.devices[kc]
    ]
    cost = parallel_transfer_s(context, forward)
    if tensor.spec.dtype.is_float:
        cost += parallel_transfer_s(context, [(dst, src, size) for src, dst, size in forward])
    return cost


def _parameter_users(context: SimContext) -> dict[int, int]:
    users: dict[int, int] = defaultdict(int)
    for node in context.graph.ops:
        for pid in dict.fromkeys(node.weights):
            users[pid] += 1
    return users


def _inputs_from_ops(context: SimContext, op: int) -> list[tuple[int, int]]:
    """(input index, producer) of every input of `op` that an op produces."""
    graph = context.graph
    found = []
    for j, tid in enumerate(graph.ops[op].inputs):
        producer = graph.tensor(tid).producer
        if producer is not None:
            found.append((j, producer))
    return found


def additive_cost_s(context: SimContext, strategy: Strategy) -> float:
    """OptCNN's cost of `strategy`: what `optcnn` minimizes."""
    users = _parameter_users(context)
    total = 0.0
    for op, config in enumerate(strategy.configs):
        total += node_cost_s(context, op, config, users)
        for j, producer in _inputs_from_ops(context, op):
            total += edge_cost_s(context, op, j, strategy.configs[producer], config)
    return total


class _Problem:
    """The cost as tables: one vector per op (node costs), one matrix per adjacent pair (edges)."""

    def __init__(self, context: SimContext) -> None:
        users = _parameter_users(context)
        ops = range(len(context.graph.ops))
        self.configs = [optcnn_configs(context, op) for op in ops]
        self.node = [
            np.array([node_cost_s(context, op, c, users) for c in self.configs[op]]) for op in ops
        ]
        self.edges: dict[tuple[int, int], np.ndarray] = {}  # (a, b), a < b: shape (K_a, K_b)
        self.neighbours: list[set[int]] = [set() for _ in ops]
        for op in ops:
            for j, producer in _inputs_from_ops(context, op):
                table = np.array(
                    [
                        [edge_cost_s(context, op, j, p, c) for c in self.configs[op]]
                        for p in self.configs[producer]
                    ]
                )
                self.add_edge(producer, op, table)

    def add_edge(self, a: int, b: int, table: np.ndarray) -> None:
        """Add `table` (shape (K_a, K_b)) to edge a-b; parallel edges sum (edge elimination)."""
        if a > b:
            a, b, table = b, a, table.T
        if (a, b) in self.edges:
            self.edges[(a, b)] = self.edges[(a, b)] + table
        else:
            self.edges[(a, b)] = table
            self.neighbours[a].add(b)
            self.neighbours[b].add(a)

    def pop_edge(self, a: int, b: int) -> np.ndarray:
        """Remove edge a-b; its table with rows indexed by a's configurations."""
        self.neighbours[a].discard(b)
        self.neighbours[b].discard(a)
        if a < b:
            return self.edges.pop((a, b))
        return self.edges.pop((b, a)).T

    def edge(self, a: int, b: int) -> np.ndarray | None:
        if a < b:
            return self.edges.get((a, b))
        table = self.edges.get((b, a))
        return None if table is None else table.T


def optcnn(context: SimContext) -> OptCNNResult:
    """Minimize OptCNN's additive cost: elimination, exact where it removes every op."""
    problem = _Problem(context)
    num_ops = len(problem.configs)
    eliminated: list[tuple[int, tuple[int, ...], np.ndarray]] = []  # (op, neighbours, argmin)
    alive = set(range(num_ops))
    pending = sorted(alive)
    while pending:
        v = pending.pop()
        if v not in alive or len(problem.neighbours[v]) > 2:
            continue
        around = tuple(sorted(problem.neighbours[v]))
        tables = [problem.pop_edge(u, v) for u in around]  # rows: u's configurations
        if not around:
            choice = np.argmin(problem.node[v])
        elif len(around) == 1:  # leaf: fold min over v into its neighbour's node costs
            (u,), (e,) = around, tables
            total = e + problem.node[v][None, :]  # (K_u, K_v)
            choice = np.argmin(total, axis=1)
            problem.node[u] = problem.node[u] + total.min(axis=1)
        else:  # node elimination: u - v - w becomes one edge u - w
            (u, w), (e_u, e_w) = around, tables
            total = e_u[:, :, None] + problem.node[v][None, :, None] + e_w.T[None, :, :]
            choice = np.argmin(total, axis=1)  # (K_u, K_w)
            problem.add_edge(u, w, total.min(axis=1))
        eliminated.append((v, around, choice))
        alive.discard(v)
        pending += [u for u in around if u in alive]
    chosen = _topological_dp(problem, sorted(alive))
    for v, around, choice in reversed(eliminated):
        chosen[v] = int(choice[tuple(chosen[u] for u in around)])
    graph = context.graph
    strategy = Strategy(
        tuple(n.name for n in graph.ops),
        tuple(problem.configs[op][chosen[op]] for op in range(num_ops)),
    )
    return OptCNNResult(strategy, additive_cost_s(context, strategy), exact=not alive)


def _topological_dp(problem: _Problem, remaining: list[int]) -> dict[int, int]:
    """HEURISTIC assignment of ops elimination could not remove (see the module docstring)."""
    if not remaining:
        return {}
    first = remaining[0]
    cost = problem.node[first].copy()
    path = np.arange(len(cost))[:, None]  # (K_prev, ops so far): the best path to each state
    for t in range(1, len(remaining)):
        op, previous = remaining[t], remaining[t - 1]
        k = len(problem.node[op])
        total = cost[:, None] + problem.node[op][None, :]  # (K_prev, K_op)
        direct = problem.edge(previous, op)
        if direct is not None:
            total = total + direct
        for s in range(t - 1):  # earlier neighbours: their configuration on each path
            table = problem.edge(remaining[s], op)
            if table is not None:
                total = total + table[path[:, s], :]
        best = np.argmin(total, axis=0)  # (K_op,)
        cost = total[best, np.arange(k)]
        path = np.concatenate([path[best], np.arange(k)[:, None]], axis=1)
    row = path[int(np.argmin(cost))]
    return {op: int(c) for op, c in zip(remaining, row, strict=True)}


def optcnn_strategy(context: SimContext) -> Strategy:
    """OptCNN's strategy for the context's graph and machine, chosen under its additive cost."""
    return optcnn(context).strategy
