"""What a model has trained, in and out of an executor: its weights, optimizer states, batch
norm's running statistics, step count and place in its data.

`Executor.get_weights`, `set_weights`, `take_trained_state`, `save_checkpoint` and
`load_checkpoint` are these functions: reading and replacing that state is one job (every
replacement checked before anything changes, the stores' cached views dropped after), the
iterations another. The checkpoint file itself (format, atomic writes, checks) is
`flexflow.checkpoint`'s.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from flexflow.checkpoint import (
    DataPosition,
    check_checkpoint,
    read_checkpoint,
    recorded_optimizer,
    write_checkpoint,
)
from flexflow.errors import CheckpointError, FlexFlowWarning, GraphError, ShapeError
from flexflow.optimizers import same_kind
from flexflow.runtime.collection import COLLECTION
from flexflow.runtime.stores import read_store
from flexflow.runtime.task_context import EXECUTORS
from flexflow.strategy_file import strategy_to_json

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def weights_of(ex: Executor) -> dict[str, np.ndarray]:
    """Every weight by name (`<layer>.<weight>`), as numpy arrays, the pending update applied."""
    ex.apply_pending()
    weights = ex.params.weights
    return {ex.graph.parameters[p].name: ex.params.value(s) for p, s in weights.items()}


def replace_weights(ex: Executor, values: Mapping[str, np.ndarray]) -> None:
    """Replace the weights named in `values`; refuses unknown names, non-numbers, wrong shapes
    and non-finite values, naming the weight, before any is replaced."""
    ex.apply_pending()  # its optimizer states move on; the weights are replaced
    by_name = {p.name: p for p in ex.graph.parameters}
    unknown = sorted(set(values) - set(by_name))
    if unknown:
        raise GraphError(
            f"set_weights: no weight named {', '.join(unknown)} in this model; its weights "
            f"are {', '.join(sorted(by_name))}."
        )
    arrays = {name: np.asarray(value) for name, value in values.items()}
    for name, value in arrays.items():
        param = by_name[name]
        if value.dtype.kind not in "fiub":
            raise ShapeError(
                f"set_weights: '{name}' takes numbers, got {value.dtype} values; pass a "
                "float array."
            )
        if tuple(value.shape) != param.spec.shape:
            raise ShapeError(
                f"set_weights: '{name}' has shape {param.spec.shape}, got {tuple(value.shape)}."
            )
        if not np.isfinite(value).all():  # every later step would be NaN too
            raise ShapeError(
                f"set_weights: '{name}' holds {np.size(value) - np.isfinite(value).sum()} "
                "non-finite values (NaN or inf); pass finite weights."
            )
    ex.forget_views()  # views of the stores replaced here
    ex.params.replace_weights(
        {by_name[name].id: value.astype(np.float32) for name, value in arrays.items()}
    )


def take_trained_state(ex: Executor, other: Executor) -> None:
    """Continue from what `other`, an executor of the same model under any strategy, has
    trained: its weights, batch norm's running statistics and the epochs done. The optimizer
    starts afresh (zero states, step count 0), as after Keras' compile."""
    closed = other.id not in EXECUTORS
    if closed:  # its stores are still there to read: open it again for that
        EXECUTORS[other.id] = other
        COLLECTION.hold()
    try:
        replace_weights(ex, weights_of(other))
        for op in ex.running:
            value = other.batch_statistics.running_value(
                op, read_store(other.store_of(other.running[op]))
            )
            ex.running[op] = ex.store_of(ex.batch_statistics.stored_running(op, value))
    finally:
        if closed:
            other.close()
    ex.forget_views()  # views of the statistics replaced here
    ex.position = other.position
    ex.steps_before = other.steps_trained


def save_checkpoint(ex: Executor, path: str | os.PathLike[str]) -> Path:
    """Write every weight, the optimizer's states, batch norm's running statistics, the
    iteration count and where the run stands in its data (`position`) to `path` atomically
    (`flexflow.checkpoint`)."""
    arrays = weights_of(ex)  # the pending update applied first
    for pid, stores in ex.params.states.items():
        name = ex.graph.parameters[pid].name
        for state, store in zip(ex.optimizer.state_names, stores, strict=True):
            arrays[f"{name}@{state}"] = ex.params.value(store)
    for op, store in ex.running.items():
        value = ex.batch_statistics.running_value(op, read_store(ex.store_of(store)))
        arrays[f"{ex.graph.ops[op].name}@running"] = value
    strategy = strategy_to_json(ex.strategy, ex.graph, ex.machine)
    return write_checkpoint(
        path, arrays, ex.iteration, ex.optimizer, strategy, ex.position, ex.steps_before,
        regularized(ex.graph),
    )  # fmt: skip


def regularized(graph) -> dict[str, float]:
    """The L2 lambdas of `graph`'s regularized weights, by name (`Parameter.l2`)."""
    return {p.name: p.l2 for p in graph.parameters if p.l2}


def load_checkpoint(ex: Executor, path: str | os.PathLike[str]) -> None:
    """Restore what `save_checkpoint` wrote, so training resumes bit-identically; refuses a
    checkpoint that lacks anything this model and optimizer need, before changing any. The
    optimizer's hyperparameters are the checkpoint's (where a learning rate schedule had
    brought them; `Executor.set_optimizer` after this changes them), of the same kind."""
    values, meta = read_checkpoint(path)
    saved = recorded_optimizer(path, meta)
    graph = ex.graph
    running = {op: f"{graph.ops[op].name}@running" for op in ex.running}
    shapes = {p.name: p.spec.shape for p in graph.parameters}
    check_checkpoint(path, values, meta, shapes, ex.optimizer, list(running.values()))
    current = ex.optimizer
    if saved is not None and not same_kind(current, saved):
        raise CheckpointError(
            f"checkpoint {path} was saved training with {saved}; this model trains with "
            f"{current}: compile it with the checkpoint's kind of optimizer to resume (its "
            "states and step count are that one's)."
        )
    replace_weights(ex, {name: values[name] for name in shapes})
    for op, key in running.items():
        ex.running[op] = ex.store_of(ex.batch_statistics.stored_running(op, values[key]))
    ex.params.replace_states(
        {
            param.id: [values[f"{param.name}@{state}"] for state in ex.optimizer.state_names]
            for param in graph.parameters
        }
    )
    if saved is not None:
        ex.set_optimizer(saved)  # the same kind and states (checked above)
    trained_with, has = meta.get("l2", {}), regularized(graph)
    if trained_with != has:  # a choice the model's code makes: a note, not a refusal
        warnings.warn(
            FlexFlowWarning(
                f"checkpoint {path} was trained with L2 lambdas {trained_with or 'none'} and "
                f"this model has {has or 'none'}: training goes on with this model's; build "
                "its dense layers with the checkpoint's kernel_regularizer to resume as it "
                "trained."
            ),
            stacklevel=2,
        )
    ex.iteration = int(meta.get("iteration", 0))
    ex.steps_before = int(meta.get("steps_before", 0))
    ex.position = DataPosition.of(meta)
    ex.forget_views()  # views of the states and statistics replaced here
