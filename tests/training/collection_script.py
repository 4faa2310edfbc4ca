"""Run in a Legate process by test_api.py: predictions on cuPyNumeric data, then training under
a strategy whose tasks run Python bodies, several times (cuPyNumeric leaves cyclic garbage
holding stores; a collection inside a task body aborted the process: runtime.collection)."""

from __future__ import annotations

import gc
import json
import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.optimizers import AdamOptimizer

rng = np.random.default_rng(0)
x = rng.standard_normal((165, 12)).astype(np.float32)
y = rng.integers(0, 3, 165).astype(np.int32)

import cupynumeric  # noqa: E402  (after flexflow, which prepares Legate)

model = FFModel(FFConfig(batch_size=16, seed=4, import_strategy="model"))
h = model.dense(model.create_tensor((16, 12), name="x"), 32, ActiMode.AC_MODE_RELU)
model.softmax(model.dense(model.dropout(h, 0.3), 3))
model.compile(AdamOptimizer(2e-3), progress=False)
automatic_while_open = gc.isenabled()
losses = []
for _ in range(6):
    model.predict(cupynumeric.asarray(x))
    losses.append(model.fit(x, y, 1)[0].loss)
model.executor.close()
sys.stdout.write(
    json.dumps({"losses": losses, "automatic": [automatic_while_open, gc.isenabled()]}) + "\n"
)
