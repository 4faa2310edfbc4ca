"""FFModel: FlexFlow's model, its layer API (`flexflow.layers`) with compile, fit, eval and
predict on Legate (`flexflow.runtime`): the strategy is chosen at compile (`flexflow.planning`)
and the data checked against the graph before the first batch (`flexflow.model_inputs`).
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from flexflow.config import FFConfig
from flexflow.data import Batch, DataLoader
from flexflow.errors import GraphError, ShapeError
from flexflow.layers import LAYER_METHODS, LayerAPI, Tensor
from flexflow.model_inputs import check_batch, model_loader
from flexflow.optimizers import Optimizer, chosen_optimizer

if TYPE_CHECKING:
    from rich.console import Console

    from flexflow.cost import Profile
    from flexflow.machine import Machine
    from flexflow.planning import Plan
    from flexflow.runtime.training import Metrics
    from flexflow.strategy import Strategy


class FFModel(LayerAPI):
    """A model built layer by layer (`flexflow.layers.LayerAPI`), then compiled and trained."""

    def __init__(self, config: FFConfig | None = None) -> None:
        super().__init__()
        self.config = config or FFConfig()
        self.name = "model"
        """What exported strategy files name the model (`load_model` sets the zoo name or the
        model file's stem)."""
        self._trainer = None  # set by compile()
        self._optimizer: Optimizer | None = None  # set before compile (`optimizer`)

    @property
    def _compiled(self) -> bool:
        return self._trainer is not None

    # ---- training (FlexFlow's compile / fit / eval) ----------------------------------------------
    def compile(
        self,
        optimizer: Optimizer | str | None = None,
        loss_type: str = "sparse_categorical_crossentropy",
        metrics: Sequence[str] | None = None,
        *,
        machine: Machine | None = None,
        console: Console | None = None,
        progress: bool = True,
        record_timeline: bool = False,
        profile: Profile | None = None,
        resumed_strategy: Strategy | None = None,
    ) -> Plan:
        """Choose the strategy (config: search_budget, import/export_strategy, trials: after a
        search, the close candidates timed in throwaway executors on this process, alone; a
        run of several ranks searches with seed + rank on each and keeps one pick,
        `flexflow.runtime.agreement`), place the model on this process's Legate processors
        and prepare training; returns how the strategy was chosen. Starts Legate. The model takes no more layers after this. With
        `record_timeline` every task's measured time is kept (`executor.timeline`); `profile`
        (measured task times, `flexflow profile`) prices the search's simulations;
        `resumed_strategy`, the strategy of a checkpoint the run will load
        (`flexflow.checkpoint.checkpoint_strategy`), is kept instead of searching. `metrics`
        default to accuracy under the cross-entropies and to none under mean squared error,
        where accuracy is categorical (the target's largest entry: one-hot targets only).
        `optimizer` may be named ("sgd", "adam": at the config's learning rate); None takes
        the one set as `model.optimizer`, else SGD at the config's learning rate. Compiling
        again (another optimizer, strategy or budget) keeps what the model has trained (its
        weights, batch norm's statistics, the epochs done) and starts the optimizer afresh,
        as Keras does."""
        from flexflow.bootstrap import check_network_library, python_handles_ctrl_c
        from flexflow.runtime.loss import check_model_output, loss_kind, loss_name, metric_names

        graph = self.graph()
        check_model_output(graph, loss_type)  # before Legate starts
        for tensor in graph.input_tensors:  # and before a search for this batch size
            check_batch(tensor, self.config.batch_size)
        self._check_loss_input(loss_type)
        if metrics is None:  # accuracy where the loss is a classification's
            metrics = loss_kind(loss_type).default_metrics
        metrics = metric_names(metrics, loss_name(loss_type))  # before the search
        check_network_library()  # one of several ranks: before Legate looks for MPI
        from legate.core import get_legate_runtime  # starts Legate: Realm takes SIGINT

        from flexflow.machine import parse_machine
        from flexflow.planning import plan_strategy
        from flexflow.runtime import Executor
        from flexflow.runtime.agreement import agree_on_strategy
        from flexflow.runtime.training import Trainer
        from flexflow.runtime.trials import time_candidates

        graph, machine = self.graph(), machine or parse_machine("local")
        if optimizer is None:
            optimizer = self.optimizer  # set before, or the compiled one (a checkpoint's)
        optimizer = chosen_optimizer(optimizer, self.config.learning_rate)
        measure = agree = None
        runtime = get_legate_runtime()
        python_handles_ctrl_c()
        if runtime.node_count > 1:  # each rank searches with its seed; all keep one pick
            agree = functools.partial(agree_on_strategy, graph, machine)
        elif self.config.trials:
            measure = functools.partial(
                time_candidates,
                graph,
                loss=loss_type,
                optimizer=optimizer,
                steps_per_execution=self.config.steps_per_execution,
                seed=self.config.seed,
            )
        plan = plan_strategy(
            graph,
            machine,
            budget_s=self.config.search_budget,
            import_path=self.config.import_strategy,
            export_path=self.config.export_strategy,
            model_name=self.name,
            seed=self.config.seed + runtime.node_id,
            console=console,
            profile=profile,
            loss=loss_type,
            steps_per_execution=self.config.steps_per_execution,
            measure=measure,
            agree=agree,
            resumed=resumed_strategy,
        )
        executor = Executor(
            graph,
            plan.strategy,
            seed=self.config.seed,
            optimizer=optimizer,
            record_timeline=record_timeline,
            steps_per_execution=self.config.steps_per_execution,
        )
        try:
            trainer = Trainer(executor, loss_type, metrics, console, progress)
            if self._trainer is not None:  # compiled again: train on from where it stands
                executor.take_trained_state(self._trainer.executor)
        except BaseException:
            executor.close()  # not left open (collection stays off while one is)
            raise
        if self._trainer is not None:
            self._trainer.executor.close()
        self._trainer, self._optimizer = trainer, optimizer
        return plan

    def _check_loss_input(self, loss: str) -> None:
        """Raise ShapeError unless `loss` can read the model's output (a cross-entropy: a
        softmax over the last axis); at compile, before any search."""
        from flexflow.runtime.loss import check_loss_input

        check_loss_input(self.graph(), loss)

    @property
    def optimizer(self) -> Optimizer | None:
        """The optimizer training uses: the compiled model's, or before `compile` the one set
        here (FlexFlow's `model.optimizer = SGDOptimizer(...)`), which `compile` then takes.
        Set on a compiled model it changes the hyperparameters from the next iteration on
        (the same kind of optimizer: its states carry over; `Executor.set_optimizer`)."""
        if self._trainer is not None:  # a loaded checkpoint's may have replaced it
            return self._trainer.executor.optimizer
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Optimizer | str) -> None:
        optimizer = chosen_optimizer(optimizer, self.config.learning_rate)
        if self._trainer is not None:
            self._trainer.executor.set_optimizer(optimizer)
        self._optimizer = optimizer

    def set_learning_rate(self, learning_rate: float) -> None:
        """Train on at `learning_rate` (a schedule: call it from fit's `on_epoch`); the other
        hyperparameters and the optimizer's states stay."""
        current = self.optimizer or chosen_optimizer(None, self.config.learning_rate)
        self.optimizer = replace(current, learning_rate=learning_rate)

    @property
    def executor(self):
        """The compiled model's `flexflow.runtime.Executor` (weights, checkpoints)."""
        return self._compiled_trainer().executor

    def _compiled_trainer(self):
        if self._trainer is None:
            raise GraphError("call FFModel.compile(...) before fit, eval or executor.")
        return self._trainer

    def _loader(self, x, y, shuffle: bool, drop_last: bool, targets: bool = True) -> DataLoader:
        """`x` and `y` as a DataLoader of the config's batches, every input and (with
        `targets`) every target checked against the model before the first batch."""
        loader = self._data(x, y, shuffle, drop_last)
        if targets:
            from flexflow.runtime.loss import check_targets

            output = self.graph().ops[-1].sig.output_shape
            check_targets(self._compiled_trainer().loss, output, loader.target, loader.samples)
        return loader

    def _data(self, x, y, shuffle: bool, drop_last: bool) -> DataLoader:
        """`x` and `y` as a DataLoader of the config's batches, each input checked against
        the model's before any batch is cut or fed (`flexflow.model_inputs`)."""
        return model_loader(self.graph(), self.config, x, y, shuffle, drop_last, self._input_name)

    def _input_name(self, key) -> str | None:
        """The input name of `key` if it is a Tensor handle of this model, else None."""
        if isinstance(key, Tensor) and key.model == id(self) and key.id in self._tensors:
            return self._tensors[key.id].name
        return None

    def fit(
        self,
        x=None,
        y=None,
        epochs: int | None = None,
        *,
        shuffle: bool = True,
        checkpoint: str | None = None,
        on_epoch=None,
        initial_epoch: int | None = None,
        validation_data=None,
    ) -> list[Metrics]:
        """Train on `x` (an array for a one-input model, a dict by input name or input
        tensor, a list in input order, or a DataLoader) and `y` for `epochs` (default: the
        config's) more epochs, as FlexFlow's and Keras' fit do; each call's epochs draw new
        data orders. With `initial_epoch` (Keras'), the epochs from there until `epochs`: a
        run resumed from a checkpoint continues with `fit(x, y, total,
        initial_epoch=model.executor.epochs_done)`. Saves `checkpoint` after each epoch; the
        metrics of the epochs run here (a line per epoch where no `on_epoch` takes them).
        Given arrays, every iteration takes a whole batch (the graph's batch size is fixed):
        an epoch leaves out the samples past the last whole batch, which shuffling changes
        from epoch to epoch; without shuffling the same ones never train, and fit warns of it
        (a DataLoader keeps its own `shuffle` and `drop_last`).
        `validation_data` (Keras'), an (x, y) pair taken as `eval` takes them, is evaluated
        after each epoch (each epoch's Metrics.validation, and its line); it is checked with
        the training data, before the first batch. Inputs or targets holding NaN or
        infinities are refused, here as in eval and predict (`flexflow.data.check_finite`)."""
        loader = self._loader(x, y, shuffle, drop_last=True)
        validation = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                size = (
                    f" of {len(validation_data)}"
                    if isinstance(validation_data, tuple | list)
                    else ""
                )
                raise ShapeError(
                    "fit: validation_data is an (x, y) pair, as eval takes them (no sample "
                    f"weights); got a {type(validation_data).__name__}{size}."
                )
            try:
                validation = self._loader(*validation_data, False, drop_last=False)
            except ShapeError as exc:
                raise ShapeError(f"fit: validation_data: {exc}") from None
        rest = loader.samples % loader.batch_size
        if rest and loader.drop_last and not loader.shuffle:
            warnings.warn(
                f"fit: the last {rest} of {loader.samples} samples never train (batches of "
                f"{loader.batch_size}, shuffle=False); shuffle, or pass a whole number of "
                "batches.",
                stacklevel=2,
            )
        trainer = self._compiled_trainer()
        return trainer.fit(
            loader,
            self.config.epochs if epochs is None else epochs,
            checkpoint,
            on_epoch,
            initial_epoch,
            validation,
        )

    def eval(self, x=None, y=None) -> Metrics:
        """Loss and metrics over every sample of `x`, `y` (a short last batch is padded)."""
        loader = self._loader(x, y, False, drop_last=False)
        return self._compiled_trainer().evaluate(loader)

    def train_on_batch(self, x, y) -> Metrics:
        """One training iteration (forward, loss, backward, update) on exactly one batch of
        `x` and `y` (given as `fit` takes them), for a loop written by hand (Keras'
        `train_on_batch`); that batch's loss and metrics, once the iteration is done.
        `fit` is faster: it issues the next iterations while one runs."""
        begin = time.perf_counter()
        stats = self._issue_train_batch(self._one_batch(x, y, "train_on_batch"), "train_on_batch")
        return self._compiled_trainer().batch_metrics([stats], time.perf_counter() - begin)

    def _one_batch(self, x, y, method: str) -> Batch:
        """`x` and `y` as one batch, checked as `fit` checks its data: exactly the model's
        batch size of samples."""
        loader = self._loader(x, y, False, drop_last=False)
        if loader.samples != self.config.batch_size:
            raise ShapeError(
                f"{method} takes one batch of {self.config.batch_size} samples (the model's "
                f"batch size), got {loader.samples}; cut the data into batches, or let fit "
                "do it."
            )
        return next(iter(loader))

    def _issue_train_batch(self, batch: Batch, method: str):
        """Issue one training iteration on `batch` (checked: `_one_batch`) without waiting;
        its unread `flexflow.runtime.batches.BatchStats`. `method` names the caller."""
        return self._compiled_trainer().issue_batch(batch)

    def _issue_eval_batch(self, batch: Batch, method: str):
        """Issue the forward pass and loss of `batch` (no update) without waiting; its
        unread stats."""
        return self._compiled_trainer().issue_eval_batch(batch)

    def predict(self, x) -> np.ndarray:
        """The model's output for every sample of `x` (as `fit` takes it; a DataLoader gives
        its own order), in order, as one numpy array: the forward pass as `eval` runs it
        (dropout passes its input on, batch norm uses its running statistics), one batch at a
        time (a short last batch is padded)."""
        loader = self._loader(x, None, False, drop_last=False, targets=False)
        executor = self._compiled_trainer().executor
        outputs = [executor.forward(batch.inputs)[: batch.valid] for batch in loader.epoch(0)]
        return np.concatenate(outputs)


__all__ = ["LAYER_METHODS", "FFModel", "Tensor"]  # the layer API's, where they were
