"""The CPU variant's tile backend of a fused task (`flexflow.fused_run.TileBackend`): numpy
arrays and the ops' numpy/C tiles, a batch norm's statistics summed over a concurrent launch's
points in memory (`flexflow.runtime.statistics_exchange`). The GPU variant's is
`flexflow.gpu.variant`'s."""

from __future__ import annotations

import numpy as np


class CpuTiles:
    """The CPU variant's side of a fused task: numpy arrays and the ops' numpy/C tiles;
    `exchange` (a `StatisticsExchange`) sums a batch norm's partial statistics over a
    concurrent launch's points, this task being point `point`."""

    def __init__(self, exchange=None, point: int = 0) -> None:
        self.exchange, self.point = exchange, point

    def all_sum(self, partial: np.ndarray) -> np.ndarray:
        return self.exchange.all_sum(self.point, partial)

    @staticmethod
    def forward(op, sig, region, inputs, weights):
        return op.forward_tile(sig, region, inputs, weights)

    @staticmethod
    def forward_saving(op, sig, region, inputs, weights):
        return op.forward_tile_saving(sig, region, inputs, weights)

    @staticmethod
    def backward(
        op, sig, region, inputs, weights, outputs, grads, need_input_grads, into, saved=None
    ):
        return op.backward_tile_into(
            sig, region, inputs, weights, outputs, grads, need_input_grads, into, saved
        )

    def forward_with_statistics(self, op, sig, x, weights, running, into, training, exchange):
        running, into = running.reshape(2, -1), into.reshape(2, -1)  # (a point's row)
        if training and x.dtype == np.float32:  # one C call, the exchange in it
            pointer = self.exchange.pointer if exchange else None
            return op.train_forward_tile(sig, x, weights, running, into, pointer, self.point)
        if training:
            stats = op.statistics_forward(x)
            if exchange:
                stats = self.all_sum(stats)
            into[...] = op.running_update(sig, stats, running)
        else:
            stats = op.statistics_from_running(sig, running)
        return op.forward_tile_with_statistics(sig, x, weights, stats), stats

    def backward_exchanging(self, op, sig, x, weights, y, dy, stats):
        if stats is not None and x.dtype == np.float32:  # one C call, the exchange in it
            pointer = self.exchange.pointer
            return op.train_backward_tile(sig, x, weights, y, dy, stats, pointer, self.point)
        if stats is None:
            stats = self.all_sum(op.statistics_forward(x))
        grad_stats = self.all_sum(op.statistics_backward(sig, x, weights, y, dy, stats))
        return op.backward_tile_with_statistics(sig, x, weights, y, dy, stats, grad_stats)

    @staticmethod
    def write(target: np.ndarray, value) -> None:
        target[...] = value

    @staticmethod
    def add(target: np.ndarray, value) -> None:
        target[...] += value

    @staticmethod
    def accumulate(total, value):
        return total + value

    @staticmethod
    def window(value: np.ndarray, where) -> np.ndarray:
        return value[where]

    @staticmethod
    def add_window(total: np.ndarray, where, value) -> None:
        total[where] += value

    @staticmethod
    def zeros_like(value) -> np.ndarray:
        return np.zeros_like(value)

    @staticmethod
    def hold(value, dtype: str) -> np.ndarray:
        return np.asarray(value, dtype=dtype)


CPU_TILES = CpuTiles()
"""The backend of fused tasks that exchange nothing."""
