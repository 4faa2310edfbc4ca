"""FlexFlow's Python names, for scripts written against FlexFlow (`from flexflow.core import *`).

FlexFlow's examples start with that import, read their settings with `FFConfig()` (the
command line's -b, -e, --lr, ...), build optimizers from the model (`SGDOptimizer(ffmodel,
0.01)`, its hyperparameters in FlexFlow's order), name losses and metrics by enums, feed
data through `create_data_loader` and the model's `label_tensor`, and read accuracy from
`get_perf_metrics()`. This module gives those names over this package's API, so such a script
runs with few changes (README "Porting a FlexFlow script" says which;
`examples/flexflow_mlp.py`). Code written for this package uses `flexflow`,
`flexflow.optimizers` and arrays instead.
"""

from __future__ import annotations

import argparse
import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from flexflow import ActiMode, AggrMode, PoolType
from flexflow import DataType as _DType
from flexflow.config import FFConfig as _FFConfig
from flexflow.data import Batch
from flexflow.errors import FlexFlowError, NotOfferedError, ShapeError
from flexflow.flexflow_data import LABEL_TENSOR, FlexFlowTensor, LabelTensor, SingleDataLoader
from flexflow.flexflow_layers import LayerHandles
from flexflow.flexflow_loop import HandWrittenLoop
from flexflow.layers import Tensor
from flexflow.model import FFModel as _FFModel
from flexflow.optimizers import AdamOptimizer as _Adam
from flexflow.optimizers import SGDOptimizer as _SGD
from flexflow.regularizers import RegularizerMode
from flexflow.runtime.loss import check_loss_input
from flexflow.runtime.training import Metrics


class _DataTypes(type):
    """FlexFlow's other data types (DT_HALF, DT_DOUBLE, ...) named as not taken here."""

    def __getattr__(cls, name: str):
        if name.startswith("DT_"):
            raise NotOfferedError(
                f"DataType.{name} is not one flexflow takes: tensors are DT_FLOAT, DT_INT32 or "
                "DT_INT64 (layers compute in float32)."
            )
        raise AttributeError(name)


class DataType(metaclass=_DataTypes):
    """FlexFlow's `DataType` names of the element types flexflow takes (`flexflow.DataType`)."""

    DT_NONE = None  # FlexFlow's "the input's type" default: the layers' own here
    DT_FLOAT = _DType.DT_FLOAT
    DT_INT32 = _DType.DT_INT32
    DT_INT64 = _DType.DT_INT64


class LossType(enum.Enum):
    """FlexFlow's loss names (`compile(loss_type=LossType...)`)."""

    LOSS_CATEGORICAL_CROSSENTROPY = "categorical_crossentropy"
    LOSS_SPARSE_CATEGORICAL_CROSSENTROPY = "sparse_categorical_crossentropy"
    LOSS_MEAN_SQUARED_ERROR_AVG_REDUCE = "mean_squared_error"
    LOSS_IDENTITY = "identity"  # the model's output is its loss (`flexflow.runtime.loss`)


class MetricsType(enum.Enum):
    """FlexFlow's metric names; a loss named as a metric is the loss every epoch reports."""

    METRICS_ACCURACY = "accuracy"
    METRICS_CATEGORICAL_CROSSENTROPY = "categorical_crossentropy"
    METRICS_SPARSE_CATEGORICAL_CROSSENTROPY = "sparse_categorical_crossentropy"
    METRICS_MEAN_SQUARED_ERROR = "mean_squared_error"


class ParameterSyncType(enum.Enum):
    """FlexFlow's ways of synchronizing weights (`set_tensor`'s last argument): the
    optimizer's update sums every device's gradient here, whichever is named."""

    NONE = 80
    PS = 81
    NCCL = 82


class FlexFlowConfig(_FFConfig):
    """FFConfig with FlexFlow's run queries: how many processors and nodes train, a clock."""

    @property
    def workers_per_node(self) -> int:
        """The processors one node trains on: its GPUs, or its CPUs where it has none
        (FlexFlow's workers; starts Legate)."""
        from legate.core import TaskTarget, get_legate_runtime, get_machine

        machine, nodes = get_machine(), get_legate_runtime().node_count
        gpus = machine.count(TaskTarget.GPU)
        return (gpus or machine.count(TaskTarget.CPU)) // nodes

    @property
    def num_nodes(self) -> int:
        """The ranks Legate runs (starts Legate)."""
        from legate.core import get_legate_runtime

        return get_legate_runtime().node_count

    @staticmethod
    def get_current_time() -> float:
        """A clock in microseconds, as FlexFlow's (for elapsed times only)."""
        return time.perf_counter() * 1e6

    def parse_args(self) -> None:
        """Nothing left to parse: `FFConfig()` read the command line."""

    def begin_trace(self, trace_id: int) -> None:
        """Nothing to do: each training iteration is one step this runtime issues itself
        (FlexFlow asks Legion to trace the loop's launches)."""

    def end_trace(self, trace_id: int) -> None:
        """Nothing to do (`begin_trace`)."""


def FFConfig() -> FlexFlowConfig:  # noqa: N802 (FlexFlow's constructor)
    """FlexFlow's `FFConfig()`: the training settings from this process's command line
    (`flexflow.config.FFConfig.from_args`: -b, -e, --lr, --seed, --budget, --import, ...)."""
    return FlexFlowConfig.from_args()


@dataclass(frozen=True)
class NetConfig:
    """FlexFlow's example settings: the data set's path (`-d`/`--dataset`), "" without one."""

    dataset_path: str = ""

    def __init__(self) -> None:
        parser = argparse.ArgumentParser(add_help=False)
        parser.add_argument("-d", "--dataset", default="")
        object.__setattr__(self, "dataset_path", parser.parse_known_args()[0].dataset)


class _Initializer:
    """FlexFlow's initializers: `init` names the draw of `flexflow.ops.init` it is, for the
    layers to take when it is their own (None: one they cannot take)."""

    init: str | None = None

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.args}"


class GlorotUniformInitializer(_Initializer):
    """Glorot-uniform: the kernels' own draw here (its seed is the run's, FFConfig.seed)."""

    init = "glorot_uniform"


class ZeroInitializer(_Initializer):
    """Zeros: the biases' own start here."""

    init = "zeros"


class _DrawnInitializer(_Initializer):
    """An initializer `FFModel` applies itself after compile (`draw`), by `set_weights`."""

    def draw(self, shape: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError


class UniformInitializer(_DrawnInitializer):
    """FlexFlow's `UniformInitializer(seed, min, max)`: values uniform in [min, max)."""

    def __init__(self, seed: int, min_val: float, max_val: float) -> None:
        super().__init__(seed, min_val, max_val)

    def draw(self, shape: tuple[int, ...]) -> np.ndarray:
        seed, low, high = self.args
        return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


class NormInitializer(_DrawnInitializer):
    """FlexFlow's `NormInitializer(seed, mean, stddev)`: normal values."""

    def __init__(self, seed: int, mean: float, stddev: float) -> None:
        super().__init__(seed, mean, stddev)

    def draw(self, shape: tuple[int, ...]) -> np.ndarray:
        seed, mean, stddev = self.args
        return np.random.default_rng(seed).normal(mean, stddev, shape).astype(np.float32)


class CompMode(enum.Enum):
    """FlexFlow's compile modes: an inference model runs forward() and predict only."""

    TRAINING = "training"
    INFERENCE = "inference"


def flexflow_python_binding() -> str:
    """Which Python binding runs FlexFlow: this one is neither of FlexFlow's ("cffi", "pybind")."""
    return "legate"


def get_configs() -> None:
    """FlexFlow's runtime settings from a JSON file: none here (FFConfig() reads the
    command line; Legate's flags set the processors)."""
    return None


def init_flexflow_runtime(configs_dict: dict | None = None, **settings: Any) -> None:
    """Nothing to do: Legate starts at the first task, with the processors its command line
    gives (FlexFlow's scripts call this first, with `get_configs()`)."""


@dataclass(frozen=True)
class PerfMetrics:
    """FlexFlow's performance metrics of the last `fit` epoch or `eval`."""

    metrics: Metrics

    def get_accuracy(self) -> float:
        """Accuracy in percent, as FlexFlow gives it (`Metrics.accuracy` is a fraction)."""
        if self.metrics.accuracy is None:
            raise FlexFlowError("no accuracy was measured: compile with METRICS_ACCURACY.")
        return 100.0 * self.metrics.accuracy


class FFModel(_FFModel, LayerHandles):
    """FlexFlow's FFModel: this package's, with FlexFlow's data loaders, label tensor,
    `init_layers`, `get_perf_metrics` and layer handles (`flexflow.flexflow_layers`)."""

    _perf: Metrics | None = None
    _pending: tuple[str, _DrawnInitializer] | None = None
    _drawn: tuple[tuple[str, _DrawnInitializer], ...] = ()
    """Weights (by name) whose FlexFlow initializer `compile` applies: uniform, normal."""

    def __init__(self, config: _FFConfig | None = None) -> None:
        super().__init__(config)
        self._loop = HandWrittenLoop()
        self._untrainable: str | None = None
        """Why the compiled loss cannot read the model's output (raised when it trains)."""

    def _check_loss_input(self, loss: str) -> None:
        """Nothing at compile: FlexFlow compiles a model its loss cannot read (its single-op
        scripts name a cross-entropy, then only run forward()); `compile` keeps the reason,
        raised at the first training or evaluation."""

    def _check_trainable(self, call: str) -> None:
        if self._untrainable is not None:
            raise ShapeError(
                f"{call}: the model was compiled for forward() alone: {self._untrainable}"
            )

    def _issue_train_batch(self, batch: Batch, method: str):
        self._check_trainable(method)
        return super()._issue_train_batch(batch, method)

    def _issue_eval_batch(self, batch: Batch, method: str):
        self._check_trainable(method)
        return super()._issue_eval_batch(batch, method)

    def train_on_batch(self, x: Any, y: Any) -> Metrics:
        self._loop.check_no_update_pending("train_on_batch")
        return super().train_on_batch(x, y)

    def _handle(self, tid: int, shape: tuple[int, ...], dtype: _DType) -> Tensor:
        return FlexFlowTensor(tid, shape, dtype, id(self))

    def dense(self, input: Tensor, out_dim: int, *args: Any, **keywords: Any) -> Tensor:
        keywords = self._drawn_later("kernel", args, 4, keywords)
        return self._remember(super().dense(input, out_dim, *args, **keywords))

    def conv2d(self, input: Tensor, out_channels: int, *args: Any, **keywords: Any) -> Tensor:
        args = list(args)
        if len(args) > 7 and args[7] is True:  # groups: FlexFlow's binding reads True as 1
            args[7] = 1
        if keywords.get("groups") is True:
            keywords["groups"] = 1
        keywords = self._drawn_later("kernel", args, 10, keywords)
        return self._remember(super().conv2d(input, out_channels, *args, **keywords))

    def _drawn_later(self, weight: str, args: Sequence, at: int, keywords: dict) -> dict:
        """`keywords` less a uniform or normal `kernel_initializer`, which `_remember` keeps
        for `compile` to apply (one given by position `at` of `args` is refused: pass it by
        keyword)."""
        if len(args) > at and isinstance(args[at], _DrawnInitializer):
            raise ShapeError(
                "pass a UniformInitializer or NormInitializer by keyword (kernel_initializer=...)."
            )
        given = keywords.get("kernel_initializer")
        self._pending = (weight, given) if isinstance(given, _DrawnInitializer) else None
        if self._pending is None:
            return keywords
        return {k: v for k, v in keywords.items() if k != "kernel_initializer"}

    def _remember(self, out: Tensor) -> Tensor:
        pending, self._pending = self._pending, None
        if pending is not None:
            weight, initializer = pending
            # the op just added (not graph(), which would stack unread LSTM sequences early)
            self._drawn += ((f"{self._ops[-1].layer}.{weight}", initializer),)
        return out

    def compile(self, *args: Any, comp_mode: CompMode = CompMode.TRAINING, **keywords: Any):
        """FlexFlow's compile; then the uniform and normal initializers its layers were given
        are applied. Under `CompMode.INFERENCE` the model runs forward() and predict, and
        refuses to train (FlexFlow's inference mode has no backward pass)."""
        if not isinstance(comp_mode, CompMode):
            raise FlexFlowError(
                f"compile(comp_mode={comp_mode!r}): pass CompMode.TRAINING or CompMode.INFERENCE."
            )
        self._loop.check_no_update_pending("compile")
        first = self._trainer is None
        plan = super().compile(*args, **keywords)
        try:
            check_loss_input(self.graph(), self._compiled_trainer().loss)
            self._untrainable = None
        except ShapeError as problem:
            self._untrainable = str(problem)
        if comp_mode is CompMode.INFERENCE:
            self._untrainable = (
                "it was compiled with comp_mode=CompMode.INFERENCE; compile it with "
                "CompMode.TRAINING to train it."
            )
        self._loop.recompiled()
        if first and self._drawn:
            shapes = {p.name: p.spec.shape for p in self.graph().parameters}
            self.executor.set_weights({n: i.draw(shapes[n]) for n, i in self._drawn})
        return plan

    @property
    def label_tensor(self) -> LabelTensor:
        return LABEL_TENSOR

    def get_label_tensor(self) -> LabelTensor:
        return LABEL_TENSOR

    def set_optimizer(self, optimizer: _SGD | _Adam) -> None:
        self.optimizer = optimizer

    set_sgd_optimizer = set_adam_optimizer = set_optimizer

    # ---- the hand-written loop (flexflow.flexflow_loop) ----------------------------------
    def forward(self, seq_length: int | None = None) -> None:
        """Begin an iteration on the batch set (run by `update`; `flexflow_loop`).
        `seq_length`: FlexFlow's, taken where it is the whole sequence (`_check_seq_length`)."""
        self._check_seq_length("forward", seq_length)
        self._loop.forward(self)

    def zero_gradients(self) -> None:
        self._loop.zero_gradients()

    def backward(self, seq_length: int | None = None) -> None:
        self._check_seq_length("backward", seq_length)
        self._loop.backward()

    def _check_seq_length(self, call: str, seq_length: int | None) -> None:
        """FlexFlow runs the first `seq_length` positions of a sequence model (all of them when
        it is negative, None or the whole length or more); here every iteration runs whole,
        so only those values are taken."""
        if seq_length is None or (isinstance(seq_length, int) and seq_length < 0):
            return
        lengths = {t.spec.shape[1] for t in self.graph().input_tensors if len(t.spec.shape) > 1}
        if not lengths or not isinstance(seq_length, int) or seq_length < max(lengths):
            whole = ", ".join(map(str, sorted(lengths))) or "none (no input has a dimension 1)"
            raise NotOfferedError(
                f"{call}(seq_length={seq_length!r}): running part of a sequence is not offered; "
                f"the inputs' sequence length is {whole}: leave seq_length out or pass it."
            )

    def update(self) -> None:
        """Run the iteration: forward, loss, backward and the optimizer's update (issued;
        `get_perf_metrics` waits for its results)."""
        self._loop.update(self)
        self._perf = None  # the loop's, when asked for

    def compute_metrics(self) -> None:
        """Evaluate the batch forward() ran on (no update), into the loop's metrics:
        FlexFlow's evaluation loop, forward() then compute_metrics()."""
        self._loop.compute_metrics(self)
        self._perf = None

    def reset_metrics(self) -> None:
        """Start the loop's metrics (`get_perf_metrics`) afresh."""
        self._loop.reset_metrics()
        self._perf = None

    def create_data_loader(self, tensor: Tensor | LabelTensor, array: Any) -> SingleDataLoader:
        """The data of input `tensor` (or of `label_tensor`: the labels), for `fit`/`eval`."""
        if not isinstance(tensor, (Tensor, LabelTensor)):
            raise ShapeError(
                f"create_data_loader takes an input tensor or model.label_tensor, got {tensor!r}."
            )
        return SingleDataLoader(tensor, array)

    def init_layers(self) -> None:
        """Nothing to do: `compile` initializes the weights."""
        self._compiled_trainer()

    def fit(
        self,
        x: Any = None,
        y: Any = None,
        batch_size: int | None = None,
        epochs: int = 1,
        **keywords: Any,
    ) -> list[Metrics]:
        """FlexFlow's fit, in its order (x, y, batch_size, epochs): `epochs` (default 1, as
        FlexFlow's) more epochs, x and y as loaders or arrays; `flexflow.FFModel.fit`'s
        keywords (initial_epoch, checkpoint, on_epoch, shuffle, validation_data: a pair
        taken as x and y are) too."""
        self._check_batch(batch_size)
        self._check_trainable("fit")
        self._loop.check_no_update_pending("fit")
        self._loop.reset_metrics()  # FlexFlow's fit and eval reset the metrics too
        self._loop.forget_output()
        pair = keywords.get("validation_data")
        if isinstance(pair, (tuple, list)) and len(pair) == 2:  # loaders, as x and y may be
            keywords["validation_data"] = self._arrays(*pair)
        history = super().fit(*self._arrays(x, y), epochs, **keywords)
        self._perf = history[-1] if history else self._perf
        return history

    def eval(self, x: Any = None, y: Any = None, batch_size: int | None = None) -> Metrics:
        self._check_batch(batch_size)
        self._check_trainable("eval")
        self._loop.reset_metrics()
        self._perf = super().eval(*self._arrays(x, y))
        return self._perf

    def get_perf_metrics(self) -> PerfMetrics:
        """The metrics of the last `fit` epoch or `eval`, or of the hand-written loop's
        iterations since `reset_metrics`, whichever came last."""
        if self._perf is None:
            self._perf = self._loop.metrics(self)
        if self._perf is None:
            raise FlexFlowError(
                "no metrics yet: call fit or eval, or update() in a hand-written loop, first "
                "(reset_metrics() starts them afresh)."
            )
        return PerfMetrics(self._perf)

    def predict(self, x: Any, batch_size: int | None = None) -> np.ndarray:
        """`flexflow.FFModel.predict`, with FlexFlow's and Keras' `batch_size` (which must
        be the model's, as fit's and eval's)."""
        self._check_batch(batch_size)
        return super().predict(x)

    def _check_batch(self, batch_size: int | None) -> None:
        if batch_size is not None and batch_size != self.config.batch_size:
            raise ShapeError(
                f"batch_size={batch_size}, but the model was built for batches of "
                f"{self.config.batch_size} (-b): leave batch_size out (FlexFlow's order is "
                "fit(x, y, batch_size, epochs): pass epochs by keyword)."
            )

    @staticmethod
    def _arrays(x: Any, y: Any) -> tuple[Any, Any]:
        """x and y with FlexFlow's loaders made arrays (by input tensor) and labels."""
        loaders = x if isinstance(x, Sequence) else [x]
        if all(isinstance(loader, SingleDataLoader) for loader in loaders):
            x = {loader.tensor: loader.array for loader in loaders}
        if isinstance(y, SingleDataLoader):
            y = y.array
        return x, y


def SGDOptimizer(  # noqa: N802 (FlexFlow's constructor)
    ffmodel: FFModel | None = None,
    lr: float = 0.01,
    momentum: float = 0.0,
    nesterov: bool = False,
    weight_decay: float = 0.0,
) -> _SGD:
    """FlexFlow's `SGDOptimizer(ffmodel, lr, momentum, nesterov, weight_decay)`; the model is
    not needed (`model.optimizer = ...` or `compile(optimizer)` gives it to one)."""
    return _SGD(lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)


def AdamOptimizer(  # noqa: N802 (FlexFlow's constructor)
    ffmodel: FFModel | None = None,
    alpha: float = 0.001,
    beta1: float = 0.9,
    beta2: float = 0.999,
    weight_decay: float = 0.0,
    epsilon: float = 1e-8,
) -> _Adam:
    """FlexFlow's `AdamOptimizer(ffmodel, alpha, beta1, beta2, weight_decay, epsilon)` (the
    order differs from `flexflow.optimizers.AdamOptimizer`'s keywords); the model is not needed."""
    return _Adam(alpha, beta1=beta1, beta2=beta2, weight_decay=weight_decay, epsilon=epsilon)


__all__ = [
    "ActiMode",
    "AdamOptimizer",
    "AggrMode",
    "CompMode",
    "DataType",
    "FFConfig",
    "FFModel",
    "GlorotUniformInitializer",
    "LossType",
    "MetricsType",
    "NetConfig",
    "NormInitializer",
    "ParameterSyncType",
    "PoolType",
    "RegularizerMode",
    "SGDOptimizer",
    "UniformInitializer",
    "ZeroInitializer",
    "SingleDataLoader",
    "flexflow_python_binding",
    "get_configs",
    "init_flexflow_runtime",
]
