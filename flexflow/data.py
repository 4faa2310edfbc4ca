"""Data loaders: a data set in numpy or cuPyNumeric arrays, cut into the model's fixed batches.

The operator graph has a fixed batch size, so every batch has exactly that many samples. A
training epoch drops the short remainder (its samples come back in other epochs' shuffles); an
evaluation pads its last batch by repeating the first sample and says how many samples are real
(`Batch.valid`), which the loss tasks use to count only those. The order of an epoch depends on
(seed, epoch) alone, so a run resumed at any iteration sees the same batches as one that never
stopped. The runtime copies each batch in as the first op's configuration partitions it
(`flexflow.tiling.input_shards`); a cuPyNumeric array's batches stay in Legate stores throughout.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexflow.errors import FlexFlowError, ShapeError
from flexflow.ops.checks import is_int

Array = Any
"""A numpy array or a cuPyNumeric array (anything with shape, indexing and len)."""


@dataclass(frozen=True, slots=True)
class Batch:
    inputs: Mapping[str, Array]
    target: Array | None
    valid: int
    """How many leading samples are real (the rest pad a last, short batch)."""


FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_finite(what: str, values: Array) -> None:
    """Raise ShapeError naming `what` if float data holds NaN or an infinity, or values beyond
    float32's range (the model's type: they become infinities there): training on them shows
    only a loss of nan, epochs later. A cuPyNumeric array is checked by reductions in Legate
    (one number each comes back, not the data)."""
    xp = _namespace(values)
    if xp is np:
        values = np.asarray(values)
    if np.dtype(values.dtype).kind != "f" or values.size == 0:
        return
    with np.errstate(all="ignore"):  # NaN and inf survive a sum: checked without a copy
        total = float(xp.sum(values, dtype=np.float64))
        wide = np.dtype(values.dtype).itemsize > 4  # float64 beyond float32's range: inf there
        largest = max(float(xp.max(values)), -float(xp.min(values))) if wide else 0.0  # no copy
        if math.isfinite(total) and largest <= FLOAT32_MAX:
            return
    rows = values.reshape(values.shape[0] if values.ndim else 1, -1)
    bad = ~xp.isfinite(rows) | (xp.abs(rows) > FLOAT32_MAX) if wide else ~xp.isfinite(rows)
    per_sample = np.asarray(bad.any(axis=1))  # one flag per sample comes back
    if not per_sample.any():  # finite values whose sum overflowed
        return
    raise ShapeError(
        f"{what} holds NaN, infinite or beyond-float32 values in {int(per_sample.sum()):,} of "
        f"its {len(per_sample):,} samples (the first is sample {int(np.argmax(per_sample))}); "
        "clean or drop them first."
    )


def _namespace(array: Array):
    """numpy, or cupynumeric for its arrays (without importing it for numpy data)."""
    module = sys.modules.get(type(array).__module__.split(".")[0])
    return module if hasattr(array, "__legate_data_interface__") and module else np


class DataLoader:
    """Batches of `inputs` (by the model's input tensor names) and `target` (None: inputs
    only), `batch_size` each."""

    def __init__(
        self,
        inputs: Mapping[str, Array],
        target: Array | None,
        batch_size: int,
        *,
        shuffle: bool = False,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if not inputs:
            raise FlexFlowError("DataLoader: give at least one input array (by input name).")
        sizes = {name: len(array) for name, array in inputs.items()}
        if target is not None:  # None: inputs alone (`FFModel.predict`)
            sizes["target"] = len(target)
        if len(set(sizes.values())) != 1:
            raise FlexFlowError(
                f"DataLoader: every array needs one entry per sample, got lengths {sizes}."
            )
        self.samples = next(iter(sizes.values()))
        if not is_int(batch_size) or batch_size <= 0:
            raise FlexFlowError(f"DataLoader: batch_size must be positive, got {batch_size!r}.")
        if drop_last and self.samples < batch_size:
            raise FlexFlowError(
                f"DataLoader: {self.samples} samples make no full batch of {batch_size}; use a "
                f"smaller batch (FFConfig(batch_size=...)) or more data."
            )
        self.inputs, self.target = dict(inputs), target
        self.batch_size, self.shuffle, self.seed, self.drop_last = (
            batch_size,
            shuffle,
            seed,
            drop_last,
        )

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(self.samples, self.batch_size)
        return full + (1 if rest and not self.drop_last else 0)

    def order(self, epoch: int) -> np.ndarray:
        """The sample order of `epoch`: a permutation fixed by (seed, epoch) when shuffling."""
        if not self.shuffle:
            return np.arange(self.samples)
        return np.random.default_rng([self.seed, epoch]).permutation(self.samples)

    def epoch(self, epoch: int = 0, start: int = 0) -> Iterator[Batch]:
        """The batches of `epoch`, from batch number `start` on (to resume mid-epoch)."""
        order = self.order(epoch)
        for index in range(start, len(self)):
            picked = order[index * self.batch_size : (index + 1) * self.batch_size]
            valid = len(picked)
            if valid < self.batch_size:
                picked = np.concatenate([picked, np.full(self.batch_size - valid, picked[0])])
            yield Batch(
                {name: self._take(array, picked) for name, array in self.inputs.items()},
                None if self.target is None else self._take(self.target, picked),
                valid,
            )

    def __iter__(self) -> Iterator[Batch]:
        return self.epoch(0)

    @staticmethod
    def _take(array: Array, picked: np.ndarray) -> Array:
        start, stop = int(picked[0]), int(picked[-1]) + 1
        if stop - start == len(picked) and np.array_equal(picked, np.arange(start, stop)):
            return array[start:stop]  # a view: no gather for in-order data
        xp = _namespace(array)
        if xp is np:
            return array[picked]
        # take, not array[index]: cuPyNumeric 25.11's advanced indexing kept ~25 KB per
        # gather and slowed each one down (a helper's runs: +10 MB and 1.2 -> 10.6 s per
        # epoch over 150 shuffled epochs of 128 batches)
        return xp.take(array, xp.asarray(picked), axis=0)
