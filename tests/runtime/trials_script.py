"""Run in a Legate process by test_trials.py: timing strategies in throwaway executors, and a
compile whose search is followed by trials of every candidate."""

from __future__ import annotations

import json

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
import flexflow.planning as planning
from flexflow import FFConfig
from flexflow.machine import parse_machine
from flexflow.optimizers import SGDOptimizer
from flexflow.planning import Candidate
from flexflow.runtime import Executor
from flexflow.runtime.trials import synthetic_batch, time_candidates
from flexflow.strategies import data_parallel_over, named_strategy
from flexflow.zoo import load_model

LOSS = "sparse_categorical_crossentropy"
graph = load_model("lenet", FFConfig(batch_size=16)).graph()
dp, one = named_strategy("dp", graph, parse_machine("local")), data_parallel_over(graph, 1)
rng = np.random.default_rng(1)
inputs = {"image": rng.standard_normal((16, 1, 28, 28)).astype(np.float32)}
labels = rng.integers(0, 10, 16)


def losses(strategy) -> list[float]:
    """Three SGD steps from the seed's weights: what a run's executor starts from."""
    with Executor(graph, strategy, seed=3, optimizer=SGDOptimizer(0.05)) as executor:
        return [executor.train_batch(inputs, labels, LOSS).read()[0] for _ in range(3)]


before = losses(dp)
candidates = [Candidate("dp", dp, 1.0), Candidate("one", one, 1.0)]
timed = time_candidates(
    graph, candidates, 0.5, loss=LOSS, optimizer=SGDOptimizer(0.05), steps_per_execution=4, seed=3
)
after = losses(dp)
batch_inputs, batch_target = synthetic_batch(graph, LOSS)
words = load_model("rnnlm", FFConfig(batch_size=4), seq_length=5, vocab_size=30).graph()
word_inputs, word_labels = synthetic_batch(words, LOSS)
(ids,) = word_inputs.values()
_, one_hot = synthetic_batch(graph, "categorical_crossentropy")

planning.TRIAL_MARGIN = 1e9  # every distinct candidate is close: all of them are timed
model = load_model("lenet", FFConfig(batch_size=16, search_budget=1.0, seed=3))
plan = model.compile(SGDOptimizer(0.05), LOSS, progress=False)
kept = min(plan.trials, key=lambda c: c.measured_ms)
trained = model.executor.train_batch(inputs, labels, LOSS).read()[0]
model.executor.close()
print(
    json.dumps(
        {
            "timed_s": timed,
            "before": before,
            "after": after,
            "batch": {k: [str(v.dtype), list(v.shape)] for k, v in batch_inputs.items()},
            "target": [str(batch_target.dtype), list(batch_target.shape)],
            "labels": [int(batch_target.min()), int(batch_target.max())],
            "ids": [str(ids.dtype), int(ids.min()), int(ids.max()), len(np.unique(ids))],
            "word_labels": [list(word_labels.shape), int(word_labels.max())],
            "one_hot": [list(one_hot.shape), one_hot.sum(axis=1).tolist()],
            "trials": [[c.label, c.simulated_ms, c.measured_ms] for c in plan.trials],
            "kept_is_fastest": plan.strategy == kept.strategy,
            "source": plan.source,
            "trained_loss": trained,
        }
    )
)
