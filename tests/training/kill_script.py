"""Run in a Legate process by test_checkpoints.py: trains a model with a large weight (so a
checkpoint takes a while to write) and saves a checkpoint after every step, printing the
iteration of each completed save, until it is killed."""

from __future__ import annotations

import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import FFConfig, FFModel
from flexflow.optimizers import AdamOptimizer

path = sys.argv[1]
model = FFModel(FFConfig(batch_size=8))
x = model.create_tensor((8, 1024), name="x")
model.softmax(model.dense(model.dense(x, 2048, name="wide"), 4, name="head"))
model.compile(AdamOptimizer(1e-3), "sparse_categorical_crossentropy", progress=False)
rng = np.random.default_rng(0)
inputs = {"x": rng.standard_normal((8, 1024)).astype(np.float32)}
labels = rng.integers(0, 4, 8)
executor = model.executor
while True:
    executor.train_batch(inputs, labels, "sparse_categorical_crossentropy").read()
    executor.save_checkpoint(path)
    print(f"saved {executor.iteration}", flush=True)
