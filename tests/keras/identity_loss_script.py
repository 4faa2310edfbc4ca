"""FlexFlow's examples/python/keras/identity_loss.py model (Dense, then a sum to (sample,)) trained
with compile(loss='identity') in flexflow.keras and with LossType.LOSS_IDENTITY in flexflow.core,
in one Legate process (run by test_identity_loss.py): each epoch's loss, as one JSON line."""

from __future__ import annotations

import json

import numpy as np

import flexflow.core as ff
import flexflow.keras.backend
from flexflow.keras.layers import Dense, Input
from flexflow.keras.losses import Identity
from flexflow.keras.models import Model
from flexflow.keras.optimizers import SGD

SAMPLES, LR = 256, 0.01


def keras_losses(x, y, loss) -> list[float]:
    inputs = Input(shape=(32,), dtype="float32")
    out = flexflow.keras.backend.sum(Dense(20, activation="relu", name="h")(inputs), axis=1)
    model = Model(inputs, out)
    model.compile(optimizer=SGD(learning_rate=LR), loss=loss)
    return [float(v) for v in model.fit(x, y, epochs=3).history["loss"]]


def evaluated(x, y) -> dict:
    """evaluate's loss over 300 samples (a padded last batch) and predict's outputs' mean."""
    inputs = Input(shape=(32,), dtype="float32")
    out = flexflow.keras.backend.sum(Dense(20, activation="relu", name="h")(inputs), axis=1)
    model = Model(inputs, out)
    model.compile(optimizer=SGD(learning_rate=LR), loss="identity")
    loss = float(model.evaluate(x, y, verbose=0))
    return {"loss": loss, "mean_output": float(np.mean(model.predict(x), dtype=np.float64))}


def ffmodel_losses(x, y) -> list[float]:
    model = ff.FFModel(ff.FFConfig())
    t = model.create_tensor((model.config.batch_size, 32), name="x")
    t = model.dense(t, 20, ff.ActiMode.AC_MODE_RELU, name="h")
    model.reduce_sum(t, axes=[1])
    model.compile(ff.SGDOptimizer(model, LR), loss_type=ff.LossType.LOSS_IDENTITY, metrics=[])
    return [m.loss for m in model.fit(x, y, epochs=3)]


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, 32)).astype(np.float32)
    y = np.zeros(SAMPLES, np.float32)  # ignored, as the example's
    report = {
        "keras": keras_losses(x, y, "identity"),
        "keras_object": keras_losses(x, y, Identity()),
        "keras_other_labels": keras_losses(x, rng.integers(0, 9, (SAMPLES, 3)), "identity"),
        "ffmodel": ffmodel_losses(x, y),
        "evaluated": evaluated(
            rng.standard_normal((300, 32)).astype(np.float32), np.zeros(300, np.float32)
        ),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
