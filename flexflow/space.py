"""The SOAP search space of one op on one machine: which configurations are valid, and all of them.

Space of an op with output shape s and partitionable dims P on a machine of D devices:
every degree tuple with deg(d) dividing s[d] for d in P (1 elsewhere) and prod(deg) = n <= D,
each combined with every block of n consecutive device ids [start, start + n), start = 0..D-n.
Blocks of consecutive ids include every block aligned to node boundaries (devices are numbered
node by node), so data parallelism inside one node, across whole nodes, or over the whole
machine are all in the space. Size: sum over degree tuples of (D - n + 1); see
`space_size`, and `flexflow space MODEL --machine M` for every op of a model.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

from flexflow.graph import OpNode
from flexflow.machine import Machine
from flexflow.ops import Signature
from flexflow.strategy import ParallelConfig


def _divisors(n: int, limit: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def degree_choices(sig: Signature, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """Every valid degree tuple of the op's output for a machine of `num_devices` devices."""
    per_dim = [
        tuple(d for d in _divisors(size, num_devices) if dim.fits(size, d))
        if dim.partitionable
        else (1,)
        for dim, size in zip(sig.dims, sig.output_shape, strict=True)
    ]
    return tuple(
        degrees for degrees in itertools.product(*per_dim) if math.prod(degrees) <= num_devices
    )


@lru_cache(maxsize=4096)
def _configs(sig: Signature, num_devices: int) -> tuple[ParallelConfig, ...]:
    configs = []
    for degrees in degree_choices(sig, num_devices):
        n = math.prod(degrees)
        for start in range(num_devices - n + 1):
            configs.append(ParallelConfig(degrees, tuple(range(start, start + n))))
    return tuple(configs)


def enumerate_configs(sig: Signature, machine: Machine) -> tuple[ParallelConfig, ...]:
    """All configurations of the op on `machine` (the set MCMC proposals draw from)."""
    return _configs(sig, machine.num_devices)


def space_size(sig: Signature, machine: Machine) -> int:
    d = machine.num_devices
    return sum(d - math.prod(deg) + 1 for deg in degree_choices(sig, d))


def config_problems(node: OpNode, config: ParallelConfig, machine: Machine) -> list[str]:
    """Every reason `config` is not valid for `node` on `machine`; empty when it is valid."""
    label = f"{node.kind} '{node.name}'"
    shape = node.sig.output_shape
    problems: list[str] = []
    if len(config.degrees) != len(shape):
        return [
            f"{label}: {len(config.degrees)} degrees given for its rank-{len(shape)} output "
            f"{shape}; give one degree per dimension ({', '.join(d.name for d in node.sig.dims)})."
        ]
    for dim, size, degree in zip(node.sig.dims, shape, config.degrees, strict=True):
        if degree == 1:
            continue
        if not dim.partitionable:
            problems.append(
                f"{label}: dimension '{dim.name}' cannot be split (degree {degree} given); "
                f"set it to 1. Splittable: {', '.join(d.name for d in node.sig.dims if d.partitionable)}."
            )
        elif size % degree:
            problems.append(
                f"{label}: degree {degree} on dimension '{dim.name}' does not divide its size "
                f"{size} (output {shape}); choose a degree that divides {size}."
            )
        elif not dim.fits(size, degree):
            problems.append(
                f"{label}: degree {degree} on dimension '{dim.name}' makes tiles of "
                f"{size // degree}, which split its blocks of {dim.block} (a grouped "
                f"convolution's channels per group) unevenly; choose a degree whose tiles hold "
                f"whole blocks or part of one."
            )
    if config.num_tasks > machine.num_devices:
        problems.append(
            f"{label}: {config.num_tasks} tasks but machine '{machine.name}' has "
            f"{machine.num_devices} devices; lower the degrees so their product is at most "
            f"{machine.num_devices}."
        )
    bad = sorted({d for d in config.devices if not 0 <= d < machine.num_devices})
    if bad:
        problems.append(
            f"{label}: device(s) {', '.join(map(str, bad))} do not exist on machine "
            f"'{machine.name}' (devices 0-{machine.num_devices - 1}); use ids in that range."
        )
    return problems
