"""Calls into the C kernels indexed by integer ids: an embedding's table gradient, the sparse cross-entropy."""

from __future__ import annotations

import numpy as np

from flexflow._kernels import ffi, lib

from .native_args import f32, floats, pointer


def embedding_backward(ids: np.ndarray, dy: np.ndarray, table_rows: int) -> np.ndarray | None:
    """The table's gradient (table_rows, E): each row of dy (ids.size, E) added into its id's
    row in order, as numpy's add.at (ids: int32); None when an id lies outside the table."""
    ids = np.ascontiguousarray(ids, dtype=np.int32)
    dy = f32(dy.reshape(ids.size, -1))
    grad = np.empty((table_rows, dy.shape[1]), dtype=np.float32)
    status = lib.ff_embedding_backward_f32(
        ffi.from_buffer("int[]", ids), floats(dy), floats(grad), ids.size, dy.shape[1], table_rows
    )
    return None if status else grad


def sparse_xent(probabilities: np.ndarray, labels: np.ndarray, total: int, valid_rows: int):
    """(loss, gradient, correct) of sparse categorical cross-entropy on float32 softmax rows
    (rows, classes) and one label per row, over the first `valid_rows` (the gradient is zero
    past them); None when a label lies outside [0, classes)."""
    p = f32(probabilities)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    grad = np.empty_like(p)
    loss, correct = ffi.new("double *"), ffi.new("long *")
    status = lib.ff_sparse_xent_f32(
        floats(p), pointer(labels, "long long[]"), floats(grad), p.shape[0],
        p.shape[1], valid_rows, float(total), loss, correct,
    )  # fmt: skip
    return None if status else (loss[0], grad, int(correct[0]))
