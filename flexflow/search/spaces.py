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
    return lambda op: enumerate_configs(graph.ops[op].sig, machine)


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


def project(strategy: Strategy, space: Space) -> Strategy:
    """The strategy with every op moved into `space` (its first configuration there if
    outside): where a restricted space's search starts."""
    configs = []
    for i, config in enumerate(strategy.configs):
        choices = space(i)
        configs.append(config if config in choices else choices[0])
    return Strategy(strategy.ops, tuple(configs))
