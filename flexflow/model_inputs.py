"""How fit, eval and predict take data: `x` and `y` as a DataLoader of the model's batches,
every input checked against the operator graph before the first batch is cut or fed, so a bad
sample at the end of the data is found before training, not an epoch later inside a task.

`x` is an array for a one-input model, a dict by input name or by the Tensor handles
`create_tensor` returned, a list in the inputs' order, or a DataLoader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from flexflow.config import FFConfig
from flexflow.data import DataLoader, check_finite
from flexflow.errors import ShapeError
from flexflow.graph import GraphTensor, OperatorGraph, OpNode


def model_loader(
    graph: OperatorGraph,
    config: FFConfig,
    x,
    y,
    shuffle: bool,
    drop_last: bool,
    input_name: Callable[[object], str | None],
) -> DataLoader:
    """`x` and `y` as a DataLoader of `config`'s batches for a model of `graph`, each input
    checked against the graph's before any batch is cut or fed; `input_name` gives the input
    name of a key of `x` that is one of the model's Tensor handles (None otherwise)."""
    if x is None:  # numpy would make an object array of it: "got object data"
        raise ShapeError("x is None; pass the model's inputs (an array, a list or a dict by name).")
    if isinstance(x, DataLoader):
        if y is not None:
            raise ShapeError(
                "y was given beside a DataLoader, which holds its own targets; pass them "
                "to the DataLoader, or x and y as arrays."
            )
        if x.batch_size != config.batch_size:
            raise ShapeError(
                f"the DataLoader cuts batches of {x.batch_size}, but the model's batch size "
                f"is {config.batch_size}; make it with "
                "batch_size=model.config.batch_size."
            )
        data = x.inputs
    else:
        data = inputs_by_name(x, graph, input_name)
    names = [t.name for t in graph.input_tensors]
    unknown = [name for name in data if name not in names]
    missing = [name for name in names if name not in data]
    if unknown or missing:
        raise ShapeError(
            f"the model's inputs are {names}; the data "
            + (f"names {unknown}, which it has not" if unknown else f"lacks {missing}")
            + ": key x by the input names (or the tensors create_tensor returned)."
        )
    for tensor in graph.input_tensors:
        check_input(graph, config.batch_size, tensor, data[tensor.name])
    if not all(np.shape(value)[0] for value in data.values()):
        raise ShapeError(
            f"x holds no samples (inputs of shapes {[np.shape(v) for v in data.values()]}); "
            "pass at least one."
        )
    if isinstance(x, DataLoader):
        return x
    return DataLoader(
        data,
        y if y is None or hasattr(y, "shape") else np.asarray(y),  # a list: an array
        config.batch_size,
        shuffle=shuffle,
        seed=config.seed,
        drop_last=drop_last,
    )


def inputs_by_name(x, graph: OperatorGraph, input_name: Callable[[object], str | None]) -> dict:
    """`x` by input name: a dict by name or by the Tensor create_tensor returned, a list
    or tuple in the inputs' order (several inputs), or the one input's array."""
    inputs = graph.input_tensors
    if isinstance(x, Mapping):
        by_name = {}
        for key, value in x.items():
            key = input_name(key) or key
            key = key if isinstance(key, str) else repr(key)
            if key in by_name:
                raise ShapeError(
                    f"x gives input '{key}' twice (by name and by tensor); give it once."
                )
            by_name[key] = value
    elif isinstance(x, (list, tuple)) and (
        len(inputs) > 1 or (len(x) == 1 and np.ndim(x[0]) == len(inputs[0].spec.shape))
    ):  # one array per input (Keras' [x] too); a list of samples is the data itself
        if len(x) != len(inputs):
            raise ShapeError(
                f"the model has {len(inputs)} inputs {[t.name for t in inputs]}; x holds "
                f"{len(x)} arrays: pass one per input, in that order, or a dict by name."
            )
        by_name = {t.name: value for t, value in zip(inputs, x, strict=True)}
    elif len(inputs) != 1:
        names = [t.name for t in inputs]
        raise ShapeError(f"the model has inputs {names}: pass x as a dict by those names.")
    else:
        by_name = {inputs[0].name: x}
    return {
        name: value if hasattr(value, "shape") else np.asarray(value)
        for name, value in by_name.items()
    }


def check_batch(tensor: GraphTensor, batch_size: int) -> None:
    """Raise ShapeError unless the model input `tensor` was created with `batch_size` samples
    (the config's: every batch fed has it); compile checks it before a search."""
    if tensor.spec.shape[0] != batch_size:
        raise ShapeError(
            f"input '{tensor.name}' was created with batch {tensor.spec.shape[0]} (its "
            f"first dimension, {tensor.spec.shape}), but the batch size is "
            f"{batch_size}; create inputs with model.config.batch_size."
        )


def check_input(graph: OperatorGraph, batch_size: int, tensor: GraphTensor, given) -> None:
    """Raise ShapeError unless `given` fits the model input `tensor` (its samples' shape,
    integer ids within the embeddings reading them) and the input has `batch_size`."""
    check_batch(tensor, batch_size)
    if not tensor.spec.dtype.is_float:
        _check_ids(graph, tensor, given)
    elif np.dtype(given.dtype).kind not in "fiub":  # strings, objects: not numbers
        raise ShapeError(
            f"input '{tensor.name}' takes numbers ({tensor.spec.dtype.name}), got "
            f"{given.dtype} data; pass a numeric array."
        )
    sample = tensor.spec.shape[1:]
    if tuple(np.shape(given))[1:] != sample:
        raise ShapeError(
            f"input '{tensor.name}' takes samples of shape {sample} (the model's input "
            f"is {tensor.spec.shape}, the batch first), got an array of shape "
            f"{tuple(np.shape(given))}; pass data whose samples have shape {sample}."
        )
    check_finite(f"input '{tensor.name}'", given)


def _check_ids(graph: OperatorGraph, tensor: GraphTensor, given) -> None:
    """Raise ShapeError unless the data of integer input `tensor` are integers inside every
    embedding table reading them (a step found out later, without naming the layer or id)."""
    values = np.asarray(given)
    if values.dtype.kind not in "iu":
        raise ShapeError(
            f"input '{tensor.name}' takes integer ids ({tensor.spec.dtype.name}), got "
            f"{values.dtype} data; pass integer arrays (e.g. ids.astype(np.int32))."
        )
    limits = graph.index_limits(tensor.id)
    if not limits or values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    for node, limit in limits:
        if low < 0 or high >= limit:
            bad = low if low < 0 else high
            raise ShapeError(_outside(tensor, node, limit, bad, high))


def _outside(tensor: GraphTensor, node: OpNode, limit: int, bad: int, high: int) -> str:
    """The message for index `bad` of input `tensor` outside [0, limit) of op `node`, in the
    op's terms (`Op.index_terms`)."""
    noun, bounds, fix = node.op.index_terms(node.sig, limit, bad, high)
    return (
        f"input '{tensor.name}' holds {noun} {bad}, outside [0, {limit}) of {node.kind} "
        f"'{node.name}' ({bounds}); {fix}."
    )
