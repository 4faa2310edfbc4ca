"""Run in a Legate process by test_data.py: training on cuPyNumeric arrays (shuffled, so
batches are gathered inside Legate) gives the same losses as on the same numpy arrays; and
what repeated `fit` calls train (epochs count every epoch the model has trained)."""

from __future__ import annotations

import json

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.errors import FlexFlowError
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


def repeated_fits(x, y) -> dict:
    """The epochs each of fit(epochs=1), fit(epochs=1), fit(epochs=3) ran, then Keras' resumed
    form fit(epochs=7, initial_epoch=5) and fit(epochs=7, initial_epoch=7); and
    fit(epochs=0)."""
    model = FFModel(FFConfig(batch_size=16, seed=3))
    t = model.create_tensor((16, 12), name="x")
    model.softmax(model.dense(t, 3))
    model.compile(SGDOptimizer(0.1), "sparse_categorical_crossentropy", progress=False)
    ran = [[m.epoch for m in model.fit(x, y, epochs=n)] for n in (1, 1, 3)]
    ran += [[m.epoch for m in model.fit(x, y, epochs=7, initial_epoch=first)] for first in (5, 7)]
    try:
        model.fit(x, y, epochs=0)
        refused = ""
    except FlexFlowError as exc:
        refused = str(exc)
    model.executor.close()
    regression = FFModel(FFConfig(batch_size=16, seed=3))  # no accuracy unless asked for
    regression.dense(regression.create_tensor((16, 12), name="x"), 2)
    regression.compile(SGDOptimizer(0.1), "mean_squared_error", progress=False)
    mse = regression.eval(x, np.zeros((len(x), 2), np.float32))
    regression.executor.close()
    return {"ran": ran, "refused": refused, "mse_accuracy": mse.accuracy}


import cupynumeric  # noqa: E402  (after flexflow, which prepares Legate)

rng = np.random.default_rng(0)
x = rng.standard_normal((100, 12)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
report = {
    "numpy": train(x, y),
    "cupynumeric": train(cupynumeric.asarray(x), cupynumeric.asarray(y)),
    # cuPyNumeric inputs, numpy labels: a KeyError inside the step launches before
    "mixed": train(cupynumeric.asarray(x), y),
    "repeated": repeated_fits(x, y),
}
print(json.dumps(report))
