"""Which configurations a search may give each op: the full SOAP space, or a restricted baseline's.

- `soap`: every configuration of `flexflow.space` (FlexFlow's space, §4).
- `operation`: every op whole on exactly one device, any device (REINFORCE's space: placement
  only, the Operation dimension of SOAP).
"""

from __future__ import annotations

from collections.abc import Callable

from flexflow.errors import FlexFlowError
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.space import enumerate_configs
from flexflow.strategy import ParallelConfig, Strategy

Space = Callable[[int], tuple[ParallelConfig, ...]]


def soap_space(graph: OperatorGraph, machine: Machine) -> Space:
    """Memoized per op: a chain asks for its op's space at every proposal, and the lookup in
    `enumerate_configs`' own cache hashes the op's whole signature (5% of AlexNet's chains)."""
    found: dict[int, tuple[ParallelConfig, ...]] = {}

    def space(op: int) -> tuple[ParallelConfig, ...]:
        configs = found.get(op)
        if configs is None:
            configs = found[op] = enumerate_configs(graph.ops[op].sig, machine)
        return configs

    return space


def operation_space(graph: OperatorGraph, machine: Machine) -> Space:
    singles = {
        rank: tuple(ParallelConfig.single(rank, d) for d in range(machine.num_devices))
        for rank in {len(n.sig.output_shape) for n in graph.ops}
    }
    return lambda op: singles[len(graph.ops[op].sig.output_shape)]


SPACES: dict[str, Callable[[OperatorGraph, Machine], Space]] = {
    "soap": soap_space,
    "operation": operation_space,
}


def make_space(name: str, graph: OperatorGraph, machine: Machine) -> Space:
    try:
        return SPACES[name](graph, machine)
    except KeyError:
        raise FlexFlowError(
            f"unknown search space '{name}'; choose one of {', '.join(SPACES)}."
        ) from None


class SpaceSets(dict[int, frozenset[ParallelConfig]]):
    """Each op's configurations in `space` as a set, made the first time the op is looked up
    (`sets[op]`): "can this op take its neighbour's configuration?" is asked of every op,
    over and over, by MCMC's neighbour and path moves and the descent's narrow sweeps, and a
    dict lookup is the cheapest way Python has to ask it."""

    def __init__(self, space: Space) -> None:
        super().__init__()
        self._space = space

    def __missing__(self, op: int) -> frozenset[ParallelConfig]:
        configs = self[op] = frozenset(self._space(op))
        return configs


def project(strategy: Strategy, space: Space) -> Strategy:
    """The strategy with every op moved into `space` (its first configuration there if
    outside): where a restricted space's search starts."""
    configs = []
    for i, config in enumerate(strategy.configs):
        choices = space(i)
        configs.append(config if config in choices else choices[0])
    return Strategy(strategy.ops, tuple(configs))
