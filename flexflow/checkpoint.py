"""The checkpoint file: weights, optimizer states, batch norm's running statistics and the step.

One numpy .npz: each weight under its name (`<layer>.<weight>`), each optimizer state under
`<weight>@<state>`, each batch norm's running (mean, variance) under `<op>@running`, and a JSON
record (format, iteration, optimizer, the epochs done and their batch size, and the strategy it
trained with, in the strategy file's form) under `__flexflow__`. Written atomically. Reading checks
that everything the model needs is there before anything is restored, and says what is missing
and why in one line.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from flexflow.errors import CheckpointError, FlexFlowError, StrategyError, shown
from flexflow.fileio import atomic_write_bytes
from flexflow.graph import OperatorGraph
from flexflow.machine import Machine
from flexflow.ops.checks import is_int
from flexflow.optimizers import Optimizer, optimizer_from_json
from flexflow.strategy import Strategy
from flexflow.strategy_file import strategy_from_json

FORMAT = "flexflow-checkpoint/1"
META_KEY = "__flexflow__"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DataPosition:
    """Where a run stands in its data: the whole epochs `fit` has done, in batches of
    `batch_size` (iterations trained one batch at a time, `FFModel.train_on_batch`, are no
    part of an epoch). A run resumed from it starts the next epoch, whatever its own batch
    size (the iteration count alone would place a run with other batches inside an epoch
    already trained)."""

    epochs: int
    batch_size: int

    @staticmethod
    def of(meta: Mapping) -> DataPosition | None:
        """The position a checkpoint's record holds (None: saved by an older flexflow, or
        by a run that neither finished an epoch of `fit` nor trained one batch at a time)."""
        epochs, batch = meta.get("epochs"), meta.get("batch_size")
        valid = is_int(epochs) and is_int(batch)
        return DataPosition(epochs, batch) if valid and epochs >= 0 and batch > 0 else None


def write_checkpoint(
    path: str | os.PathLike[str],
    arrays: Mapping[str, np.ndarray],
    iteration: int,
    optimizer: Optimizer,
    strategy: Mapping | None = None,
    position: DataPosition | None = None,
    steps_before: int = 0,
    l2: Mapping[str, float] | None = None,
) -> Path:
    """Write the named arrays and the record atomically (a killed save keeps the old file;
    non-finite arrays are refused, so a diverged run keeps it too); `l2`: the L2 lambdas of
    the regularized weights, by name (recorded only when there are some);
    `strategy`: the run's, as `flexflow.strategy_file.strategy_to_json` writes it; `position`:
    where in its data the run stands, when it saves at an epoch's end; `steps_before`: the
    training steps taken before the optimizer's first (`Executor.steps_before`)."""
    for name, value in arrays.items():  # a diverged run must not replace the last good file
        value = np.asarray(value)
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise CheckpointError(
                f"not saving checkpoint {path}: '{name}' holds NaN or infinite values (training "
                "diverged: lower the learning rate or check the data for NaN); the file keeps "
                "the last checkpoint saved."
            )
    meta = {"format": FORMAT, "iteration": iteration, "optimizer": optimizer.to_json()}
    if steps_before:
        meta["steps_before"] = steps_before
    if l2:
        meta["l2"] = dict(l2)
    if strategy is not None:
        meta["strategy"] = dict(strategy)
    if position is not None:
        meta["epochs"], meta["batch_size"] = position.epochs, position.batch_size
    buffer = io.BytesIO()
    np.savez(buffer, **arrays, **{META_KEY: np.array(json.dumps(meta))})
    return atomic_write_bytes(path, buffer.getvalue())


def read_checkpoint(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict]:
    """The arrays of a checkpoint and its record (empty for a file without one), the record
    checked (`_checked_record`) and every array finite: a resumed run would train on NaN and
    save them over the file."""
    with _archive(path) as data:
        values = _read(path, lambda: {name: data[name] for name in data.files})
    meta = _read(path, lambda: json.loads(str(values.pop(META_KEY)))) if META_KEY in values else {}
    for name, value in values.items():
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise CheckpointError(
                f"checkpoint {path}: '{name}' holds NaN or infinite values (training diverged "
                "before it was saved, or the file was edited); resume from an earlier checkpoint "
                "or start over without --resume."
            )
    return values, _checked_record(path, meta)


def _checked_record(path: str | os.PathLike[str], meta: object) -> dict:
    """`meta` if it is a record this flexflow wrote: an object of its format, a non-negative
    integer iteration, an optimizer object; else CheckpointError naming what is wrong."""
    problem = ""
    if not isinstance(meta, dict):
        problem = f"its record is a JSON {type(meta).__name__}, not an object"
    elif meta and meta.get("format") != FORMAT:
        problem = f"its format is {meta.get('format')!r}, this flexflow reads {FORMAT!r}"
    elif not (is_int(meta.get("iteration", 0)) and meta.get("iteration", 0) >= 0):
        problem = f"its iteration {meta.get('iteration')!r} is not a count (an integer >= 0)"
    elif not (is_int(meta.get("steps_before", 0)) and meta.get("steps_before", 0) >= 0):
        problem = f"its steps_before {meta.get('steps_before')!r} is not a count (an integer >= 0)"
    elif not isinstance(meta.get("optimizer", {}), dict):
        problem = f"its optimizer {meta.get('optimizer')!r} is not a JSON object"
    elif not isinstance(meta.get("l2", {}), dict):
        problem = f"its L2 lambdas {shown(meta.get('l2'))} are not a JSON object"
    if problem:
        raise CheckpointError(
            f"cannot read checkpoint {path}: {problem}. The file was changed after it was saved, "
            "or another program wrote it; resume from another checkpoint or start over "
            "without --resume."
        )
    return meta


def check_checkpoint(
    path: str | os.PathLike[str],
    values: Mapping[str, np.ndarray],
    meta: dict,
    weights: Mapping[str, Sequence[int]],
    optimizer: Optimizer,
    running: Sequence[str],
) -> None:
    """Raise CheckpointError unless the checkpoint has every weight (by name, of its shape),
    every state of `optimizer` and every running statistics array (`<op>@running`) the model
    needs."""
    _check_weights(path, values, weights)
    for name, shape in weights.items():
        if tuple(values[name].shape) != tuple(shape):
            raise CheckpointError(
                f"checkpoint {path}: weight '{name}' has shape {tuple(values[name].shape)}, this "
                f"model's is {tuple(shape)}: it was saved from a model of other sizes; resume "
                f"with the model flags it was trained with (--image-size, --hidden-size, ...) or "
                f"start afresh without --resume."
            )
    absent = [
        f"{n}@{s}" for n in weights for s in optimizer.state_names if f"{n}@{s}" not in values
    ]
    if absent:
        saved = meta.get("optimizer", {}).get("type", "none recorded")
        raise CheckpointError(
            f"checkpoint {path} has no '{absent[0].split('@')[1]}' state for this "
            f"{type(optimizer).__name__} (it was saved with optimizer: {saved}); resume with the "
            f"optimizer it was saved with."
        )
    lacking = [key for key in running if key not in values]
    if lacking:
        raise CheckpointError(
            f"checkpoint {path} lacks the running statistics of batch norm "
            f"'{lacking[0].split('@')[0]}'; it was saved from another model."
        )


def _check_weights(
    path: str | os.PathLike[str], held: Iterable[str], weights: Iterable[str]
) -> None:
    held, weights = set(held), set(weights)
    missing = sorted(weights - held)
    if missing:
        raise CheckpointError(
            f"checkpoint {path} lacks {len(missing)} weight(s) of this model "
            f"({', '.join(missing[:5])}); it was saved from another model."
        )
    # the other arrays are optimizer states and running statistics (`name@what`), the record
    extra = sorted(k for k in held - weights if "@" not in k and k != META_KEY)
    if extra:
        raise CheckpointError(
            f"checkpoint {path} holds {len(extra)} weight(s) this model lacks "
            f"({', '.join(extra[:5])}); it was saved from another model."
        )


def checkpoint_optimizer(path: str | os.PathLike[str]) -> Optimizer | None:
    """The optimizer a checkpoint was saved with (None for one that does not record it); reads
    only the record, not the arrays."""
    return recorded_optimizer(path, _record(path))


def recorded_optimizer(path: str | os.PathLike[str], meta: Mapping) -> Optimizer | None:
    """The optimizer checkpoint `path`'s record `meta` holds (None when it holds none)."""
    if "optimizer" not in meta:
        return None
    try:
        return optimizer_from_json(meta["optimizer"])
    except FlexFlowError as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from None


def checkpoint_strategy(
    path: str | os.PathLike[str], graph: OperatorGraph, machine: Machine
) -> Strategy | None:
    """The strategy a checkpoint's run trained with (None for one that does not record it),
    checked against `graph` on `machine`: a run resumed under it continues bit for bit."""
    meta = _record(path)
    if "strategy" not in meta:
        return None
    with _archive(path) as data:  # another model's checkpoint: say so before its strategy
        _check_weights(path, data.files, [p.name for p in graph.parameters])
    try:
        return strategy_from_json(meta["strategy"], graph, machine, f"checkpoint {path}")
    except StrategyError as exc:  # saved on other processors, or at another batch size
        raise StrategyError(
            f"checkpoint {path} was trained with a strategy that does not fit this run (another "
            "number of processors or another batch size); resume under one that does with "
            f"--import-strategy dp (or a strategy file for this run). {_first_of(exc)}"
        ) from None


def _first_of(exc: StrategyError) -> str:
    """'Its N problem(s), the first: ...' of a validation error's listing (a line each)."""
    problems = exc.problems or [str(exc)]
    return f"Its {len(problems)} problem(s), the first: {problems[0].strip()}"


def _record(path: str | os.PathLike[str]) -> dict:
    """A checkpoint's JSON record (empty for a file without one), without its arrays."""
    with _archive(path) as data:
        if META_KEY not in data.files:
            return {}
        return _checked_record(path, _read(path, lambda: json.loads(str(data[META_KEY]))))


_DAMAGED = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error)
"""How reading a truncated, corrupted or foreign file fails (a bad CRC is a BadZipFile)."""


def _archive(path: str | os.PathLike[str]):
    """The checkpoint's .npz archive, open (its arrays are read on access: `_read`)."""
    try:
        with open(path, "rb") as file:
            magic = file.read(4)
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {path}: {exc.strerror or exc}") from None
    if magic != b"PK\x03\x04":  # every .npz is a zip archive
        raise CheckpointError(
            f"cannot read checkpoint {path}: not a checkpoint (an .npz archive; this file "
            f"starts with {magic!r}). Point --checkpoint at a file that fit() saved."
        )
    return _read(path, lambda: np.load(path, allow_pickle=False))


def _read(path: str | os.PathLike[str], read: Callable[[], T]) -> T:
    """`read()`, a damaged file's failure said in one line: which file, what broke, what to do."""
    try:
        return read()
    except _DAMAGED as exc:
        raise CheckpointError(
            f"cannot read checkpoint {path}: {exc}. The file is damaged or truncated (checkpoints "
            "are written atomically, so it was changed after it was saved); resume from another "
            "checkpoint or start over without --resume."
        ) from None
