"""SOAP configurations and strategies (paper §4): per op, a degree per output dimension and a device per task.

A `ParallelConfig` c_i splits op i's output into prod(degrees) equal tiles (tasks), numbered
row-major over the degrees, and names the device of each task. A `Strategy` S gives every op of
an operator graph one configuration. Both are immutable, hashable values; the checks that need
the op or the machine live in `flexflow.strategy_check`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from flexflow.errors import StrategyError
from flexflow.ops.base import Region
from flexflow.ops.shapes import tile_region


@dataclass(frozen=True, slots=True)
class ParallelConfig:
    """Degrees of parallelism per output dimension (1 = not split) and the device id of each task."""

    degrees: tuple[int, ...]
    devices: tuple[int, ...]
    _hash: int = field(init=False, repr=False, compare=False)
    """Computed once: searches hash configurations millions of times (set and dict lookups)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "degrees", tuple(self.degrees))
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "_hash", hash((self.degrees, self.devices)))
        if not self.degrees or any(type(d) is not int or d < 1 for d in self.degrees):
            raise StrategyError(
                f"ParallelConfig: degrees must be positive integers, got {self.degrees}."
            )
        if len(self.devices) != self.num_tasks:
            raise StrategyError(
                f"ParallelConfig: degrees {self.degrees} make {self.num_tasks} tasks but "
                f"{len(self.devices)} devices are given; give one device per task."
            )

    def __repr__(self) -> str:
        return f"ParallelConfig(degrees={self.degrees}, devices={self.devices})"

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        """The dataclass's equality, quicker: searches compare configurations millions of times,
        most of them the same object or ones whose hashes differ."""
        if self is other:
            return True
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (
            self._hash == other._hash
            and self.degrees == other.degrees
            and self.devices == other.devices
        )

    @property
    def num_tasks(self) -> int:
        return math.prod(self.degrees)

    def task_coords(self) -> Iterator[tuple[int, ...]]:
        """Tile coordinates of each task, in task order (row-major over the degrees)."""
        return itertools.product(*(range(d) for d in self.degrees))

    def task_regions(self, shape: tuple[int, ...]) -> tuple[Region, ...]:
        """The output tile each task computes, in task order."""
        return tuple(tile_region(shape, self.degrees, coords) for coords in self.task_coords())

    @staticmethod
    def single(rank: int, device: int = 0) -> ParallelConfig:
        """The whole op as one task on `device`."""
        return ParallelConfig((1,) * rank, (device,))


@dataclass(frozen=True)
class Strategy:
    """S: one configuration per op, in the graph's op order."""

    ops: tuple[str, ...]
    configs: tuple[ParallelConfig, ...]

    def __post_init__(self) -> None:
        for key in ("ops", "configs"):  # lists given: kept as tuples, so strategies hash
            object.__setattr__(self, key, tuple(getattr(self, key)))
        if len(self.ops) != len(self.configs):
            raise StrategyError(
                f"Strategy: {len(self.ops)} op names but {len(self.configs)} configurations."
            )
        if not all(isinstance(c, ParallelConfig) for c in self.configs):
            raise StrategyError("Strategy: every configuration must be a ParallelConfig.")

    @classmethod
    def from_mapping(cls, ops: tuple[str, ...], configs: Mapping[str, ParallelConfig]) -> Strategy:
        missing = [name for name in ops if name not in configs]
        if missing:
            raise StrategyError(f"Strategy: no configuration for op(s) {', '.join(missing)}.")
        return cls(tuple(ops), tuple(configs[name] for name in ops))

    @cached_property
    def _index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.ops)}

    def index(self, op_name: str) -> int:
        try:
            return self._index[op_name]
        except KeyError:
            raise StrategyError(f"the strategy has no op named '{op_name}'.") from None

    def __getitem__(self, op: str | int) -> ParallelConfig:
        return self.configs[op if isinstance(op, int) else self.index(op)]

    def __len__(self) -> int:
        return len(self.ops)

    def items(self) -> Iterator[tuple[str, ParallelConfig]]:
        return zip(self.ops, self.configs, strict=True)

    def replace(self, op: str | int, config: ParallelConfig) -> Strategy:
        """The strategy with one op's configuration changed (an MCMC proposal)."""
        i = self._position(op)
        return self._with(self.configs[:i] + (config,) + self.configs[i + 1 :], config)

    def replace_many(self, ops: Iterable[int], config: ParallelConfig) -> Strategy:
        """The strategy with every op of `ops` (indices) given `config` (a layer or path
        move): one copy, not one per op."""
        configs = list(self.configs)
        for i in ops:
            configs[self._position(i)] = config
        return self._with(tuple(configs), config)

    def _position(self, op: str | int) -> int:
        """The index of `op` (a name, or an index that must be one of this strategy's)."""
        if not isinstance(op, int):
            return self.index(op)
        if not 0 <= op < len(self.ops):
            raise StrategyError(f"the strategy has no op number {op}; it has {len(self.ops)}.")
        return op

    def _with(self, configs: tuple[ParallelConfig, ...], new: ParallelConfig) -> Strategy:
        """This strategy's ops with `configs`, which differ from its own only by `new`: only
        that one is checked (a search makes one per proposal, and checking all of ResNet-101's
        took a tenth of its chain), and the op index is shared."""
        if not isinstance(new, ParallelConfig):
            raise StrategyError("Strategy: every configuration must be a ParallelConfig.")
        changed = object.__new__(type(self))
        object.__setattr__(changed, "ops", self.ops)
        object.__setattr__(changed, "configs", configs)
        if "_index" in self.__dict__:
            changed.__dict__["_index"] = self.__dict__["_index"]
        return changed

    def devices_used(self) -> tuple[int, ...]:
        return tuple(sorted({d for c in self.configs for d in c.devices}))
