"""The base of flexflow.keras' models: compile builds the model's layers into
`flexflow.core.FFModel` (FlexFlow's FFModel here), and fit, evaluate and predict run that
model's own fit, eval and predict, an epoch per call, with the Keras callbacks around them.

FlexFlow builds its FFModel at compile too: the batch size (-b) is only known then. As in
FlexFlow, fit's `epochs` is the script's (the command line's -e is not read by Keras models),
and an EpochVerifyMetrics callback stops training once an epoch's accuracy passes it."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.console import Console

from flexflow.errors import FlexFlowError, NotOfferedError
from flexflow.keras import losses, optimizers
from flexflow.keras import metrics as keras_metrics
from flexflow.keras.callbacks import Callback
from flexflow.keras.layers.base import Layer, refuse_unknown
from flexflow.keras.models.summary import summary_table
from flexflow.keras.tensor import KerasTensor, Node
from flexflow.layers import LayerAPI, Tensor

if TYPE_CHECKING:
    from flexflow.core import FFModel

UNSUPPORTED_FIT = {
    "validation_split": 0.0,
    "class_weight": None,
    "sample_weight": None,
    "steps_per_epoch": None,
    "validation_steps": None,
    "validation_batch_size": None,
    "validation_freq": 1,
}
"""fit's Keras arguments not offered, with the value that means 'not used'."""


@dataclass
class History:
    """What fit returns (Keras' History): each epoch's logs by name."""

    epoch: list[int] = field(default_factory=list)
    history: dict[str, list[float]] = field(default_factory=dict)


class BaseModel:
    """What Sequential and Model share; they say which nodes, inputs and output they hold."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name or type(self).__name__.lower()
        self._ffmodel: FFModel | None = None
        self._optimizer: optimizers.Optimizer | None = None
        self._loss: losses.Loss | None = None
        self.stop_training = False
        """Set by a callback (Keras' way, as EarlyStopping does): fit stops after the epoch."""

    # ---- what a subclass gives -------------------------------------------------------------
    def _nodes(self) -> list[Node]:
        raise NotImplementedError

    @property
    def inputs(self) -> list[KerasTensor]:
        raise NotImplementedError

    @property
    def output(self) -> KerasTensor:
        raise NotImplementedError

    # ---- Keras' and FlexFlow's attributes ---------------------------------------------------
    @property
    def input(self) -> list[KerasTensor]:
        return self.inputs

    @property
    def layers(self) -> list[Layer]:
        return [node.layer for node in self._nodes()]

    @property
    def ffmodel(self) -> FFModel | None:
        """The compiled `flexflow.core.FFModel` (None before compile)."""
        return self._ffmodel

    @property
    def ffconfig(self):
        return self._compiled("ffconfig").config

    @property
    def optimizer(self) -> optimizers.Optimizer | None:
        return self._optimizer

    def get_layer(self, name: str | None = None, index: int | None = None) -> Layer:
        """A layer by `index` (in the model's order, inputs not counted) or by `name`."""
        layers = self.layers
        if index is not None:
            if not -len(layers) <= index < len(layers):
                raise FlexFlowError(
                    f"get_layer(index={index}): the model has {len(layers)} layers; pass an "
                    f"index below {len(layers)}."
                )
            return layers[index]
        for layer in layers:
            if layer.name == name:
                return layer
        names = ", ".join(repr(layer.name) for layer in layers)
        raise FlexFlowError(f"get_layer: no layer named {name!r}; the model has {names}.")

    def summary(self) -> str:
        """The model's layers as a table (FlexFlow's summary returns it; print it)."""
        return summary_table(self.inputs, self._nodes(), self._ffmodel)

    # ---- compile -----------------------------------------------------------------------------
    def compile(
        self,
        optimizer: Any = "sgd",
        loss: Any = None,
        metrics: list[Any] | None = None,
        loss_weights: Any = None,
        weighted_metrics: Any = None,
        run_eagerly: Any = None,
        comp_mode: Any = None,
        **unknown: Any,
    ) -> None:
        """Build the model into `flexflow.core.FFModel` (batches of -b) and compile it."""
        refuse_unknown(
            "compile",
            {
                "loss_weights": loss_weights,
                "weighted_metrics": weighted_metrics,
                "run_eagerly": run_eagerly or None,  # False is Keras' default: not used
                **unknown,
            },
        )
        if loss is None:
            raise FlexFlowError(
                "compile: name a loss, e.g. loss='sparse_categorical_crossentropy'."
            )
        if metrics is not None and not isinstance(metrics, (list, tuple)):
            raise FlexFlowError(
                f"compile: metrics is a list, e.g. metrics=['accuracy'], got {metrics!r}."
            )
        loss = losses.get(loss)
        chosen = [keras_metrics.get(m) for m in (metrics or [])]
        optimizer = optimizers.get(optimizer)
        if optimizer.model is not None and optimizer.model is not self._ffmodel:
            raise FlexFlowError(
                f"compile: this {type(optimizer).__name__} optimizer already trains another "
                "model (its learning rate and states are that model's); give each model its "
                "own optimizer object."
            )
        trained = self._trained_weights()
        from flexflow.core import CompMode, FFConfig, FFModel  # flexflow.core imports legate

        ffmodel = FFModel(FFConfig())
        self.build_into(ffmodel, ffmodel.config.batch_size)
        ffmodel.compile(
            optimizer.ffhandle,
            loss.type,
            [m.type for m in chosen],
            comp_mode=comp_mode or CompMode.TRAINING,
        )
        for layer, weights in trained.items():  # a model compiled again keeps its weights
            layer.set_weights(ffmodel, list(weights))
        if self._optimizer is not None and self._optimizer is not optimizer:
            self._optimizer.model = None  # free for another model
        optimizer.model = ffmodel
        self._ffmodel, self._optimizer, self._loss = ffmodel, optimizer, loss

    def _trained_weights(self) -> dict[Layer, tuple]:
        """Each layer's weights in the model compiled before (none before the first compile):
        Keras keeps them when a model is compiled again (to fine-tune at another rate)."""
        if self._ffmodel is None:
            return {}
        return {
            layer: weights for layer in self.layers if (weights := layer.get_weights(self._ffmodel))
        }

    def build_into(self, api: LayerAPI, batch_size: int) -> Tensor:
        """Add the model's inputs (batches of `batch_size`) and layers to `api`, in the
        model's order; the output's handle. `compile` builds into `flexflow.core.FFModel`."""
        handles: dict[int, Tensor] = {}
        for tensor in self.inputs:
            batch = (batch_size, *tensor.shape)  # (B, *shape)
            handles[id(tensor)] = api.create_tensor(batch, tensor.dtype, name=tensor.name)
        for node in self._nodes():
            inputs = [handles[id(t)] for t in node.inputs]
            handles[id(node.outputs[0])] = node.layer.build_ff(api, inputs, final=True)
        return handles[id(self.output)]

    def _compiled(self, call: str) -> FFModel:
        if self._ffmodel is None:
            raise FlexFlowError(
                f"{call}: the model is not compiled; call model.compile(optimizer, loss, "
                "metrics) first."
            )
        return self._ffmodel

    # ---- fit, evaluate, predict -----------------------------------------------------------
    def fit(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        epochs: int = 1,
        verbose: int = 1,
        callbacks: list[Callback] | None = None,
        validation_data: Any = None,
        shuffle: bool = True,
        initial_epoch: int = 0,
        **rest: Any,
    ) -> History:
        """Train `epochs - initial_epoch` epochs on `x` (an array, or a list in the model's
        input order) and `y`, one `FFModel.fit` per epoch with the callbacks' hooks around
        it; stops early where a callback's on_epoch_end returns True."""
        ffmodel = self._compiled("fit")
        refuse_fit_arguments(rest)
        callbacks = list(callbacks or [])
        check_callbacks(callbacks)
        x = model_inputs(x)
        for callback in callbacks:
            callback.set_model(self)
            callback.set_params({"epochs": epochs, "verbose": verbose})
        history = History()
        self.stop_training = False
        console = Console(stderr=True)
        for callback in callbacks:
            callback.on_train_begin()
        for epoch in range(initial_epoch, epochs):
            for callback in callbacks:
                callback.on_epoch_begin(epoch)
            (measured,) = ffmodel.fit(
                x, y, batch_size, 1, shuffle=shuffle, validation_data=validation_data,
                on_epoch=lambda metrics: None,  # this loop says the epoch's line, or not
            )  # fmt: skip
            if verbose:
                console.print(f"epoch {epoch + 1}/{epochs}: {measured.describe()}", soft_wrap=True)
            logs = epoch_logs(measured)
            history.epoch.append(epoch)
            for key, value in logs.items():
                history.history.setdefault(key, []).append(value)
            stop = [epoch_end(callback, epoch, logs) for callback in callbacks]
            if any(s is True for s in stop) or self.stop_training:
                break
        for callback in callbacks:
            callback.on_train_end()
        return history

    def evaluate(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        verbose: int = 1,
        sample_weight: Any = None,
        steps: int | None = None,
        callbacks: Any = None,
        return_dict: bool = False,
        **rest: Any,
    ) -> Any:
        """Loss and metrics over every sample of `x`, `y`: [loss, accuracy], the loss alone
        without metrics, or a dict; Keras' queue and worker settings are ignored, its other
        arguments refused."""
        ffmodel = self._compiled("evaluate")
        refuse_unknown(
            "evaluate",
            {"sample_weight": sample_weight, "steps": steps, "callbacks": callbacks,
             **without_queue_settings(rest)},
        )  # fmt: skip
        x = model_inputs(x)
        logs = epoch_logs(ffmodel.eval(x, y, batch_size))
        if return_dict:
            return logs
        values = list(logs.values())
        return values[0] if len(values) == 1 else values  # Keras': the loss alone, a scalar

    def predict(
        self,
        x: Any,
        batch_size: int | None = None,
        verbose: Any = "auto",
        steps: int | None = None,
        callbacks: Any = None,
        **rest: Any,
    ) -> Any:
        """The model's output for every sample of `x` (`verbose` taken, not used)."""
        ffmodel = self._compiled("predict")
        refuse_unknown(
            "predict", {"steps": steps, "callbacks": callbacks, **without_queue_settings(rest)}
        )
        return ffmodel.predict(model_inputs(x), batch_size)


def model_inputs(x: Any) -> Any:
    """`x` as FFModel.fit takes it: a list in the model's input order, or a dict by input
    name (Keras takes both; one array is the one input's)."""
    if isinstance(x, dict):
        return x
    return list(x) if isinstance(x, (list, tuple)) else [x]


QUEUE_SETTINGS = frozenset(("max_queue_size", "workers", "use_multiprocessing"))
"""Keras' data-queue arguments of fit, evaluate and predict: no queue here, so ignored."""


def without_queue_settings(rest: dict[str, Any]) -> dict[str, Any]:
    """`rest` without Keras' queue settings (which `None` values would hide from refusal)."""
    return {k: (True if v is None else v) for k, v in rest.items() if k not in QUEUE_SETTINGS}


def epoch_end(callback: Callback, epoch: int, logs: dict[str, float]) -> Any:
    """`callback.on_epoch_end(epoch, logs)`, or `(epoch)` alone for a callback written for
    FlexFlow, which calls it so (`def on_epoch_end(self, logs=None)` then gets the epoch)."""
    method = callback.on_epoch_end
    try:
        inspect.signature(method).bind(epoch, logs)
    except TypeError:
        return method(epoch)
    return method(epoch, logs)


def refuse_fit_arguments(rest: dict[str, Any]) -> None:
    given = {k: v for k, v in rest.items() if UNSUPPORTED_FIT.get(k, object()) != v}
    unknown = sorted(k for k in given if k not in UNSUPPORTED_FIT)
    named = sorted(k for k in given if k in UNSUPPORTED_FIT) + [
        k for k in unknown if k not in QUEUE_SETTINGS
    ]
    if named:
        raise NotOfferedError(
            f"fit: {', '.join(named)} not offered by flexflow.keras; leave them out "
            "(validation_data=(x, y) is taken)."
        )


def check_callbacks(callbacks: list[Callback]) -> None:
    """Refuse what fit cannot honour: objects that are not callbacks, batch hooks."""
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise FlexFlowError(
                f"fit: callbacks are flexflow.keras.callbacks.Callback objects, got "
                f"{type(callback).__name__}."
            )
        for hook in ("on_batch_begin", "on_batch_end"):
            if getattr(type(callback), hook) is not getattr(Callback, hook):
                raise NotOfferedError(
                    f"fit: {type(callback).__name__}.{hook} would not be called: an epoch "
                    "runs as one FFModel.fit here; move its work to on_epoch_begin/end."
                )


def epoch_logs(measured: Any) -> dict[str, float]:
    """Keras' logs of one epoch's (or an evaluation's) `Metrics`."""
    logs = {"loss": float(measured.loss)}
    if measured.accuracy is not None:
        logs["accuracy"] = float(measured.accuracy)
    if getattr(measured, "validation", None) is not None:
        logs["val_loss"] = float(measured.validation.loss)
        if measured.validation.accuracy is not None:
            logs["val_accuracy"] = float(measured.validation.accuracy)
    return logs


__all__ = ["BaseModel", "History"]
