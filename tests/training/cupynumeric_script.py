"""Run in a Legate process by test_data.py: training on cuPyNumeric arrays (shuffled, so
batches are gathered inside Legate) gives the same losses as on the same numpy arrays."""

from __future__ import annotations

import json

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.optimizers import SGDOptimizer


def train(x, y) -> list[float]:
    model = FFModel(FFConfig(batch_size=16, epochs=2, seed=3))
    t = model.create_tensor((16, 12), name="x")
    model.softmax(model.dense(model.dense(t, 24, ActiMode.AC_MODE_RELU), 3))
    model.compile(
        SGDOptimizer(0.1, momentum=0.9), "sparse_categorical_crossentropy", progress=False
    )
    history = model.fit(x, y, shuffle=True)
    result = model.eval(x, y)
    model.executor.close()
    return [m.loss for m in history] + [result.loss, result.accuracy]


import cupynumeric  # noqa: E402  (after flexflow, which prepares Legate)

rng = np.random.default_rng(0)
x = rng.standard_normal((100, 12)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
report = {
    "numpy": train(x, y),
    "cupynumeric": train(cupynumeric.asarray(x), cupynumeric.asarray(y)),
}
print(json.dumps(report))
