"""Where the backward tasks of a strategy add the gradients of tensors read across fused groups.

A tensor read by tasks on several devices gets its gradient from each of them: every reading
task adds its tile's contribution into the gradient (a Legate ADD reduction). Legate runs two
tasks that add into overlapping regions of one store one after the other, even on two
processors (measured: two 0.2 s tasks on two CPUs took 0.4 s reducing into one region, 0.2 s
into disjoint ones). That is every split but the sample one: an output-channel split reads the
whole input on every device, a height or width split reads halos its neighbours read too; so
under those strategies each op's backward tasks ran one device at a time.

So a tensor's gradient may be kept in several parts, stores of the tensor's shape: each
writer (a task's reduction argument: its device and region) adds into the first part in which
no writer on another device overlaps its region, nor another argument of the same task (Legate
lost one of two overlapping reductions of one task into one store), and the producer's
backward tasks read every part their tiles overlap and sum them, part by part (the same order
every time). Writers that must share a
store (a concurrent launch's points, which name one tiling of it) are placed together. Where
the writers on different devices never overlap (data parallelism) there is one part, the
gradient store itself, and nothing changes. Tasks on one device run one at a time anyway, so
they share parts freely.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from flexflow.ops.base import Region

TaskKey = tuple[int, int]
"""A writing task: its fused group and its index in the group."""

Writer = tuple[TaskKey, int, Region]
"""One reduction argument of a task: the task, its device and the region it adds into."""


def _overlap(a: Region, b: Region) -> bool:
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(a, b, strict=True))


def _conflicts(writer: Writer, part: Sequence[Writer]) -> bool:
    """Whether `writer` may not add into the same store as the writers of `part`: one on
    another device overlaps it (they would run one after the other), or another argument of
    the same task does (Legate lost one of two overlapping reductions of one task into one
    store: a (2, 4, 3) store's columns 0-2 and the whole, each added 1 and 10, read 1 there
    instead of 11)."""
    task, device, region = writer
    return any(
        (d != device or k == task) and _overlap(region, r)
        for k, d, r in part
        if (k, r) != (task, region)
    )


def assign_parts(units: Sequence[Sequence[Writer]]) -> tuple[int, ...]:
    """The part of each unit of writers (arguments that name one store together), in order:
    the first part none of whose writers a writer of the unit conflicts with."""
    parts: list[list[Writer]] = []
    chosen = []
    for unit in units:
        free = (k for k, part in enumerate(parts) if not any(_conflicts(w, part) for w in unit))
        index = next(free, len(parts))
        if index == len(parts):
            parts.append([])
        parts[index].extend(unit)
        chosen.append(index)
    return tuple(chosen)


@dataclass(frozen=True, slots=True)
class GradientParts:
    """Per tensor whose gradient is kept in several parts, which part each reduction argument
    adds into and what each part's writers cover; tensors not listed keep one part (their
    gradient store)."""

    counts: dict[int, int]
    """Tensor -> its number of parts (only tensors with more than one)."""
    writes: dict[tuple[int, TaskKey, Region], int]
    """(tensor, writing task, its region) -> the part that argument adds into."""
    covered: dict[int, tuple[tuple[Region, ...], ...]]
    """Tensor -> per part, the regions its writers add into."""

    def part_of(self, tensor: int, task: TaskKey, region: Region) -> int:
        """The part a task's argument adding into `region` of `tensor`'s gradient names (0 for
        one-part tensors)."""
        if tensor not in self.counts:
            return 0
        return self.writes[(tensor, task, region)]

    def parts_read(self, tensor: int, regions: Iterable[Region]) -> tuple[int, ...]:
        """The parts a reader of `regions` sums: the first always (it holds zeros where
        nobody writes), then every other part that a writer adds into over those regions."""
        if tensor not in self.counts:
            return (0,)
        regions = tuple(regions)
        covered = self.covered[tensor]
        return (0,) + tuple(
            part
            for part in range(1, self.counts[tensor])
            if any(_overlap(r, w) for r in regions for w in covered[part])
        )


def plan_parts(units_by_tensor: dict[int, Sequence[Sequence[Writer]]]) -> GradientParts:
    """The parts of each tensor's gradient from its units of writers (`assign_parts`), in the
    order the runtime issues them."""
    counts: dict[int, int] = {}
    writes: dict[tuple[int, TaskKey, Region], int] = {}
    covered: dict[int, tuple[tuple[Region, ...], ...]] = {}
    for tensor, units in units_by_tensor.items():
        chosen = assign_parts(units)
        if max(chosen, default=0) == 0:
            continue
        counts[tensor] = max(chosen) + 1
        regions: list[list[Region]] = [[] for _ in range(counts[tensor])]
        for unit, part in zip(units, chosen, strict=True):
            for key, _, region in unit:
                writes[(tensor, key, region)] = part
                regions[part].append(region)
        covered[tensor] = tuple(tuple(r) for r in regions)
    return GradientParts(counts, writes, covered)
