"""Named strategies the paper compares against (§8.1): data parallel, expert-designed, model parallel, random.

- `dp`: every op split in the sample dimension across all devices.
- `expert`: for models without recurrent layers, Krizhevsky's "one weird trick" (convolution,
  pooling and every other op data parallel; dense layers split in the parameter dimension across
  all devices). For models with LSTMs, Wu et al.'s strategy: data parallel across nodes, and
  inside a node the layers of the same depth on the same GPU.
- `model`: every op whole on one device, layers spread over the devices by depth.
- `random`: every op gets a uniformly random configuration of its SOAP space (seeded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from flexflow.errors import StrategyError
from flexflow.graph import OperatorGraph, OpNode
from flexflow.machine import Machine
from flexflow.ops import DimKind
from flexflow.space import enumerate_configs
from flexflow.strategy import ParallelConfig, Strategy


def _largest_divisor(size: int, limit: int) -> int:
    return max(d for d in range(1, min(size, limit) + 1) if size % d == 0)


def _split(node: OpNode, kind: DimKind, devices: tuple[int, ...]) -> ParallelConfig:
    """Split the first dim of `kind` as widely as `devices` allows; tasks on the first devices."""
    degrees = [1] * len(node.sig.output_shape)
    for i, (dim, size) in enumerate(zip(node.sig.dims, node.sig.output_shape, strict=True)):
        if dim.kind is kind:
            degrees[i] = _largest_divisor(size, len(devices))
            break
    n = int(np.prod(degrees))
    return ParallelConfig(tuple(degrees), devices[:n])


def sample_split(node: OpNode, devices: tuple[int, ...]) -> ParallelConfig:
    """`node` split in its sample dimension over `devices`, as far as its batch divides (what
    data parallelism gives each op)."""
    return _split(node, DimKind.SAMPLE, devices)


def layer_depths(graph: OperatorGraph) -> dict[str, int]:
    """Depth of every layer: 0 for layers reading only model inputs, else 1 + deepest producer layer.

    Ops of one layer (the time steps of an LSTM) share their layer's depth.
    """
    depth: dict[str, int] = {}
    for node in graph.ops:
        producers = (graph.tensor(t).producer for t in node.inputs)
        parents = [graph.ops[p].layer for p in producers if p is not None]
        d = max((depth[p] + 1 for p in parents if p != node.layer), default=0)
        depth[node.layer] = max(depth.get(node.layer, 0), d)
    return depth


def data_parallel(graph: OperatorGraph, machine: Machine, seed: int = 0) -> Strategy:
    return data_parallel_over(graph, machine.num_devices)


def data_parallel_over(graph: OperatorGraph, width: int) -> Strategy:
    """Every op split in the sample dimension across the first `width` devices (as far as
    its batch divides), the others idle."""
    devices = tuple(range(width))
    return Strategy(
        tuple(n.name for n in graph.ops),
        tuple(sample_split(node, devices) for node in graph.ops),
    )


def model_parallel(graph: OperatorGraph, machine: Machine, seed: int = 0) -> Strategy:
    depth = layer_depths(graph)
    levels = max(depth.values(), default=0) + 1
    configs = tuple(
        ParallelConfig.single(
            len(node.sig.output_shape), depth[node.layer] * machine.num_devices // levels
        )
        for node in graph.ops
    )
    return Strategy(tuple(n.name for n in graph.ops), configs)


def _one_weird_trick(graph: OperatorGraph, machine: Machine) -> Strategy:
    devices = tuple(range(machine.num_devices))
    configs = tuple(
        _split(node, DimKind.PARAMETER if node.kind == "dense" else DimKind.SAMPLE, devices)
        for node in graph.ops
    )
    return Strategy(tuple(n.name for n in graph.ops), configs)


def _wu_et_al(graph: OperatorGraph, machine: Machine) -> Strategy:
    depth = layer_depths(graph)
    nodes = machine.num_nodes
    configs = []
    for node in graph.ops:
        rank = len(node.sig.output_shape)
        sample_degree = _largest_divisor(node.sig.output_shape[0], nodes)
        per_node = [machine.devices_on_node(k) for k in range(sample_degree)]
        devices = tuple(on_node[depth[node.layer] % len(on_node)].id for on_node in per_node)
        configs.append(ParallelConfig((sample_degree,) + (1,) * (rank - 1), devices))
    return Strategy(tuple(n.name for n in graph.ops), tuple(configs))


def expert(graph: OperatorGraph, machine: Machine, seed: int = 0) -> Strategy:
    if any(node.kind == "lstm" for node in graph.ops):
        return _wu_et_al(graph, machine)
    return _one_weird_trick(graph, machine)


def random_strategy(
    graph: OperatorGraph,
    machine: Machine,
    seed: int = 0,
    space: Callable[[int], Sequence[ParallelConfig]] | None = None,
) -> Strategy:
    """Every op a uniform draw from its SOAP configurations, or from `space(op)` (a restricted
    search space's), by the seed's own stream."""
    rng = np.random.default_rng(seed)
    configs = []
    for node in graph.ops:
        choices = enumerate_configs(node.sig, machine) if space is None else space(node.id)
        configs.append(choices[int(rng.integers(len(choices)))])
    return Strategy(tuple(n.name for n in graph.ops), tuple(configs))


NAMED_STRATEGIES: dict[str, Callable[[OperatorGraph, Machine, int], Strategy]] = {
    "dp": data_parallel,
    "expert": expert,
    "model": model_parallel,
    "random": random_strategy,
}


def named_strategy(name: str, graph: OperatorGraph, machine: Machine, seed: int = 0) -> Strategy:
    try:
        build = NAMED_STRATEGIES[name]
    except KeyError:
        raise StrategyError(
            f"unknown strategy name '{name}'; choose one of {', '.join(NAMED_STRATEGIES)} or a file."
        ) from None
    return build(graph, machine, seed)
