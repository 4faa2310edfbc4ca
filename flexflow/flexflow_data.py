"""FlexFlow's data access, for scripts written against it (`flexflow.core`): a data set's
loader (`SingleDataLoader`), the label tensor, and a tensor's `set_tensor`/`get_array`, which
set and read the batches of a hand-written loop (`flexflow.flexflow_loop`). Each takes the
model first, as FlexFlow's current API; only the model's inputs, the labels and its output
are read or written (the rest of a model's data: `executor.get_weights()`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from flexflow.errors import FlexFlowError, NotOfferedError, ShapeError
from flexflow.flexflow_loop import HandWrittenLoop
from flexflow.layers import Tensor
from flexflow.model_inputs import check_input
from flexflow.runtime.loss import check_targets

if TYPE_CHECKING:
    from flexflow.core import FFModel


_ATTACHED: dict[Any, list[np.ndarray]] = {}
"""The arrays each tensor has attached (`attach_numpy_array`), read-only until detached."""


class SingleDataLoader:
    """FlexFlow's data loader: the whole data set of one input (or the labels), which `fit`
    and `eval` cut into batches, or a hand-written loop takes batch by batch (`next_batch`)."""

    def __init__(self, tensor: Any, array: Any) -> None:
        self.tensor, self.array = tensor, array
        self._next = 0  # the first sample of the next batch

    @property
    def num_samples(self) -> int:
        return len(self.array)

    def reset(self) -> None:
        """Start again from the first sample."""
        self._next = 0

    def next_batch(self, ffmodel: FFModel) -> None:
        """Set the next batch of the data as the tensor's (the model's batch size of samples,
        in order)."""
        model = _model_of(ffmodel, self.tensor, "next_batch")
        size = model.config.batch_size
        if self._next + size > self.num_samples:
            raise FlexFlowError(
                f"next_batch: the loader of {tensor_name(model, self.tensor)} has given every "
                f"full batch of "
                f"{size} of its {self.num_samples} samples; call reset() to start again."
            )
        set_batch(model, self.tensor, self.array[self._next : self._next + size])
        self._next += size

    def __repr__(self) -> str:
        return f"SingleDataLoader({self.tensor!r}, {self.num_samples} samples)"


class _DataAccess:
    """FlexFlow's access to a tensor's data, for a hand-written loop (`flexflow_loop`): a
    model input's or the labels' batch is written (`set_tensor`) and read back, the model's
    output read after `forward()`. Each takes the model first, as FlexFlow's current API."""

    __slots__ = ()

    def set_tensor(self, ffmodel: FFModel, array: Any, *sync: Any) -> None:
        """Set this input's (or the labels') batch; FlexFlow's sync type changes nothing."""
        set_batch(_model_of(ffmodel, self, "set_tensor"), self, array)

    def get_tensor(self, ffmodel: FFModel, *rest: Any) -> np.ndarray:
        """A writable copy of the data (FlexFlow's fills a new array), unlike `get_array`."""
        return self._copy(ffmodel, "get_tensor")

    def get_array(self, ffmodel: FFModel, *rest: Any) -> np.ndarray:
        """A read-only copy of the data: the batch an issued iteration may still read stays
        as it was, and a write into the array, which would change the tensor in FlexFlow
        (its mapped region), raises instead of being lost (`set_tensor` sets a batch; a
        weight's `get_array` writes back at `inline_unmap`, `flexflow_layers`)."""
        data = self._copy(ffmodel, "get_array")
        data.flags.writeable = False
        return data

    def _copy(self, ffmodel: FFModel, method: str) -> np.ndarray:
        return np.array(batch_data(_model_of(ffmodel, self, method), self), copy=True)

    def get_flat_array(self, ffmodel: FFModel, *rest: Any) -> np.ndarray:
        return self.get_array(ffmodel).reshape(-1)

    def inline_map(self, ffmodel: FFModel, *rest: Any) -> None:
        """Nothing to map (`get_array` copies the data out); refused for the tensors
        `get_array` cannot read."""
        check_readable(_model_of(ffmodel, self, "inline_map"), self, "inline_map")

    def inline_unmap(self, ffmodel: FFModel, *rest: Any) -> None:
        _model_of(ffmodel, self, "inline_unmap")

    def attach_numpy_array(self, ffmodel: FFModel, ffconfig: Any, np_array: Any) -> None:
        """FlexFlow's attach of `np_array` as this input's (or the labels') data: here its
        batch is set from it (`set_tensor`, a copy) and the array made read-only until
        `detach_numpy_array`, so a write FlexFlow's attached tensor would see raises instead
        of being lost."""
        set_batch(_model_of(ffmodel, self, "attach_numpy_array"), self, np_array)
        if isinstance(np_array, np.ndarray) and np_array.flags.writeable:
            np_array.flags.writeable = False
            _ATTACHED.setdefault(self, []).append(np_array)

    def detach_numpy_array(self, ffconfig: Any = None) -> None:
        """The arrays attached to this tensor writable again (its batch stays set)."""
        for array in _ATTACHED.pop(self, []):
            array.flags.writeable = True


@dataclass(frozen=True, slots=True)
class FlexFlowTensor(_DataAccess, Tensor):
    """A tensor handle of `flexflow.core.FFModel`: `flexflow.Tensor` with FlexFlow's data
    access (`_DataAccess`)."""


class LabelTensor(_DataAccess):
    """FlexFlow's `label_tensor`: marks the loader of the labels (they are fit's y here)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "label_tensor"


LABEL_TENSOR = LabelTensor()


def set_batch(model: FFModel, tensor: Tensor | LabelTensor, array: Any) -> None:
    """A copy of `array` as the next iteration's batch of model input `tensor` (or the
    labels), checked as `fit` checks its data (FlexFlow copies at set_tensor, so its
    scripts refill one buffer while the iteration before runs)."""
    size = model.config.batch_size
    what = "the labels" if isinstance(tensor, LabelTensor) else tensor_name(model, tensor)
    if not hasattr(array, "shape"):
        if not isinstance(array, (list, tuple)):
            raise ShapeError(
                f"set_tensor of {what}: pass an array of {size} samples, got "
                f"{type(array).__name__}."
            )
        array = np.asarray(array)
    if not array.shape or len(array) != size:
        raise ShapeError(
            f"set_tensor of {what}: a batch holds {size} samples (the model's batch size), "
            f"got an array of shape {tuple(array.shape)}."
        )
    array = array.copy()
    if isinstance(tensor, LabelTensor):
        checked = model._trainer is not None and model._untrainable is None
        if checked:
            output = model.graph().ops[-1].sig.output_shape
            check_targets(model._compiled_trainer().loss, output, array, size)
        model._loop.set_labels(array, checked)
        return
    graph = model.graph()
    node = _input_of(model, graph, tensor, "set_tensor")
    check_input(graph, model.config.batch_size, node, array)
    model._loop.set_input(node.name, array)


def check_readable(model: FFModel, tensor: Tensor | LabelTensor, method: str) -> None:
    """Raise NotOfferedError unless `batch_data` reads `tensor`: an input, the labels or
    the model's output."""
    if not isinstance(tensor, LabelTensor) and tensor.id != _output_id(model):
        _input_of(model, model.graph(), tensor, method)


def _output_id(model: FFModel) -> int | None:
    """The model's output tensor (the last op's first output; None without ops)."""
    return model._ops[-1].outputs[0] if model._ops else None


def batch_data(model: FFModel, tensor: Tensor | LabelTensor) -> Any:
    """The batch set for an input or the labels, or the model's output after `forward()`."""
    if isinstance(tensor, LabelTensor):
        if model._loop.labels is None:
            raise FlexFlowError(
                "the labels have no batch yet: set one with "
                "label_tensor.set_tensor(ffmodel, labels) or their loader's next_batch(ffmodel)."
            )
        return model._loop.labels
    graph = model.graph()
    if tensor.id == _output_id(model):
        return model._loop.output(model)
    node = _input_of(model, graph, tensor, "get_array")
    if node.name not in model._loop.inputs:
        raise FlexFlowError(
            f"input '{node.name}' has no batch yet: set one with "
            "tensor.set_tensor(ffmodel, array) or its loader's next_batch(ffmodel)."
        )
    return model._loop.inputs[node.name]


def tensor_name(model: FFModel, tensor: Tensor | LabelTensor) -> str:
    """How messages name `tensor`: its graph name, or label_tensor."""
    if isinstance(tensor, LabelTensor):
        return repr(tensor)
    return f"'{model._tensors[tensor.id].name}'"


def _input_of(model: FFModel, graph, tensor: Tensor, method: str):
    inputs = {t.id: t for t in graph.input_tensors}
    if tensor.id not in inputs:
        name = model._tensors[tensor.id].name
        raise NotOfferedError(
            f"{method} of '{name}': only the model's inputs, the labels and (after "
            "forward) the model's output are read or written here; read weights with "
            "model.executor.get_weights() and set them with set_weights(...)."
        )
    return inputs[tensor.id]


def _model_of(ffmodel: Any, tensor: Any, method: str) -> FFModel:
    """`ffmodel`, the model of `tensor`, or FlexFlowError naming the call FlexFlow's API takes."""
    if not isinstance(getattr(ffmodel, "_loop", None), HandWrittenLoop):  # flexflow.core's
        raise FlexFlowError(
            f"{method} takes the model first ({method}(ffmodel, ...), as FlexFlow's current "
            f"API), got {type(ffmodel).__name__}."
        )
    if isinstance(tensor, Tensor) and tensor.model != id(ffmodel):
        raise FlexFlowError(
            f"{method}: tensor {tensor.shape} belongs to another FFModel; pass the FFModel "
            "that created it."
        )
    return ffmodel
