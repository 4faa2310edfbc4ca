"""The training loop: epochs of batches through an Executor, with progress, metrics, checkpoints.

Batches are issued to Legate without waiting; each batch's loss and correct count are read
one batch later, so Python issues batch k+1 while Legate runs batch k. Checkpoints record the
iteration count and the epochs done, and a run resumed from one (`Executor.load_checkpoint`)
continues at the next epoch (with any batch size), bit for bit where nothing changed: the data
order depends only on the loader's seed and the epoch.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from flexflow.checkpoint import DataPosition
from flexflow.data import Batch, DataLoader
from flexflow.errors import FlexFlowError
from flexflow.ops.checks import is_int
from flexflow.runtime.executor import BatchStats, Executor
from flexflow.runtime.loss import loss_name, metric_names


@dataclass(frozen=True, slots=True)
class Metrics:
    """What one epoch (or one evaluation) measured."""

    epoch: int
    loss: float
    accuracy: float | None
    samples: int
    seconds: float
    validation: Metrics | None = None
    """An epoch's evaluation on `fit`'s validation_data, after the epoch."""

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        accuracy = "" if self.accuracy is None else f", accuracy {self.accuracy:.2%}"
        said = (
            f"loss {self.loss:.4f}{accuracy}, {self.samples:,} samples in {self.seconds:.2f} s "
            f"({self.samples_per_s:,.0f} samples/s)"
        )
        if self.validation is not None:
            v = self.validation
            accuracy = "" if v.accuracy is None else f", accuracy {v.accuracy:.2%}"
            said += f"; validation loss {v.loss:.4f}{accuracy}"
        return said


class Tally:
    """Running sums of resolved batches' stats (reading one waits for its batch)."""

    def __init__(self) -> None:
        self.loss = 0.0
        self.correct = 0
        self.samples = 0
        self.predictions = 0  # a sequence output makes one per position

    def add(self, stats: BatchStats) -> None:
        loss, correct = stats.read()
        self.loss += loss * stats.samples
        self.correct += correct
        self.samples += stats.samples
        self.predictions += stats.predictions

    def metrics(self, epoch: int, seconds: float, accuracy: bool) -> Metrics:
        n = max(self.samples, 1)
        right = self.correct / max(self.predictions, 1) if accuracy else None
        return Metrics(epoch, self.loss / n, right, self.samples, seconds)


def _groups(items: Iterable, size: int) -> Iterator[list]:
    """`items` in lists of `size` (the last may be shorter)."""
    group: list = []
    for item in items:
        group.append(item)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


class Trainer:
    """Runs `fit` and `evaluate` for one executor with one loss and its metrics."""

    def __init__(
        self,
        executor: Executor,
        loss: str,
        metrics: Sequence[str] = ("accuracy",),
        console: Console | None = None,
        progress: bool = True,
    ) -> None:
        self.executor = executor
        self.loss = loss_name(loss)
        self.metrics = metric_names(metrics, self.loss)
        self.console = console or Console(stderr=True)
        self.report = progress
        """Show progress: a line per epoch of `fit` where no `on_epoch` takes its metrics."""
        self.progress = progress and self.console.is_terminal
        """Show progress bars (on a terminal: a pipe or a log gets the lines alone)."""

    def _progress(self) -> Progress:
        return Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]:.4f}"),
            TextColumn("{task.fields[accuracy]}"),
            TextColumn("{task.fields[rate]:,.0f} samples/s"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
            disable=not self.progress,
        )

    def _run(
        self,
        batches,
        total: int,
        description: str,
        issue: Callable,
        epoch: int,
    ) -> Metrics:
        """`issue(batches)` yields the results of each launch it issues, in order; the
        results of one launch are read while the next one runs."""
        tally, pending = Tally(), deque()
        accuracy = "accuracy" in self.metrics
        begin = time.perf_counter()
        with self._progress() as bar:
            task = bar.add_task(description, total=total, loss=0.0, accuracy="", rate=0.0)
            for issued in issue(batches):
                pending.extend(issued)
                while len(pending) > len(issued):  # read the last launch's while this one runs
                    tally.add(pending.popleft())
                    seconds = time.perf_counter() - begin
                    current = tally.metrics(epoch, seconds, accuracy)
                    bar.update(
                        task,
                        advance=1,
                        loss=current.loss,
                        accuracy="" if current.accuracy is None else f"acc {current.accuracy:.2%}",
                        rate=current.samples_per_s,
                    )
            while pending:
                tally.add(pending.popleft())
        return tally.metrics(epoch, time.perf_counter() - begin, accuracy)

    def fit(
        self,
        data: DataLoader,
        epochs: int,
        checkpoint: str | os.PathLike[str] | None = None,
        on_epoch: Callable[[Metrics], None] | None = None,
        initial_epoch: int | None = None,
        validation: DataLoader | None = None,
    ) -> list[Metrics]:
        """Train `epochs` more epochs (FlexFlow's and Keras' fit), numbered on from those the
        executor has done (earlier calls, a loaded checkpoint), so each draws a new data
        order; with `initial_epoch` (Keras'), the epochs from `initial_epoch` until `epochs`
        instead: a resumed run passes the epochs done (`Executor.epochs_done`) and its
        total. Saves `checkpoint` atomically after each epoch; the metrics of the epochs run
        here, each with its evaluation on `validation` after it when given."""
        if not is_int(epochs) or epochs < 1:
            raise FlexFlowError(f"fit: epochs must be a positive integer, got {epochs!r}.")
        if initial_epoch is not None and (not is_int(initial_epoch) or initial_epoch < 0):
            raise FlexFlowError(
                f"fit: initial_epoch must be an integer >= 0, got {initial_epoch!r}."
            )
        per_epoch = len(data)
        if per_epoch == 0:
            raise FlexFlowError("fit: the data loader has no batches.")
        position = self.executor.position
        if position is not None:  # whole epochs done, in batches of any size
            done, skip = position.epochs, 0
        else:  # a run without one counts its iterations in this data's batches
            done, skip = divmod(self.executor.iteration, per_epoch)
        if initial_epoch is None:
            first, last = done, done + epochs
        else:
            first, last = initial_epoch, epochs
            if first != done:
                skip = 0
            if first >= last:
                self.console.print(
                    f"fit: epochs={epochs} from initial_epoch={initial_epoch} leaves nothing "
                    "to train (epochs is the last epoch's number, as in Keras).",
                    soft_wrap=True,
                )
            elif first > 0:
                self.console.print(
                    f"fit: continuing at epoch {first + 1} of {last}.", soft_wrap=True
                )
        history = []

        def issue(batches):
            launch = self.executor.steps_per_launch
            for group in _groups(batches, launch):
                chunk = [(batch.inputs, batch.target, batch.valid) for batch in group]
                yield self.executor.train_batches(chunk, self.loss)

        for epoch in range(first, last):
            metrics = self._run(
                data.epoch(epoch, start=skip),
                per_epoch - skip,
                f"epoch {epoch + 1}/{last}",
                issue,
                epoch,
            )
            skip = 0
            self.executor.position = DataPosition(epoch + 1, data.batch_size)
            if validation is not None:
                metrics = replace(metrics, validation=self.evaluate(validation))
            history.append(metrics)
            if on_epoch is not None:  # first: the checkpoint keeps what it changes (a rate)
                on_epoch(metrics)
            elif self.report:  # the bar is transient: what stays of the epoch
                self.console.print(  # one line each, in logs too
                    f"epoch {epoch + 1}/{last}: {metrics.describe()}", soft_wrap=True
                )
            if checkpoint is not None:
                self.executor.save_checkpoint(checkpoint)
        return history

    def issue_batch(self, batch: Batch) -> BatchStats:
        """Issue one training iteration on `batch` without waiting; its stats, unread. Such
        iterations are no part of `fit`'s epochs: a `fit` after them starts a whole one."""
        (stats,) = self.executor.train_batches(
            [(batch.inputs, batch.target, batch.valid)], self.loss
        )
        if self.executor.position is None:  # else fit would count these in its epoch
            size = len(next(iter(batch.inputs.values())))
            self.executor.position = DataPosition(0, size)
        return stats

    def issue_eval_batch(self, batch: Batch) -> BatchStats:
        """Issue the forward pass and loss of `batch` (no update) without waiting; its stats."""
        (stats,) = self.executor.eval_batches(
            [(batch.inputs, batch.target, batch.valid)], self.loss
        )
        return stats

    def batch_metrics(self, batches: Sequence[BatchStats], seconds: float) -> Metrics:
        """The loss and metrics over `batches` (waits for them), as one; `seconds` taken."""
        tally = Tally()
        for stats in batches:
            tally.add(stats)
        return self.tally_metrics(tally, seconds)

    def tally_metrics(self, tally: Tally, seconds: float) -> Metrics:
        """The loss and metrics `tally` has summed, not of an epoch; `seconds` taken."""
        return tally.metrics(-1, seconds, "accuracy" in self.metrics)

    def evaluate(self, data: DataLoader) -> Metrics:
        """The loss and metrics over every sample of `data` (no update)."""

        def issue(batches):
            for group in _groups(batches, self.executor.steps_per_launch):
                chunk = [(batch.inputs, batch.target, batch.valid) for batch in group]
                yield self.executor.eval_batches(chunk, self.loss)

        return self._run(data.epoch(0), len(data), "evaluate", issue, -1)
