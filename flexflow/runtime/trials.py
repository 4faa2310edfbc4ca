"""Trial runs: the planner's close candidates timed on this process's processors.

`flexflow.planning` says why and which strategies. Each candidate trains in a throwaway
executor (its own weights, made from the run's seed; the run's executor is made afterwards and
starts from the same weights whatever was timed) on one synthetic batch (`synthetic_batch`),
which costs the kernels what real data does. A launch of
`steps_per_launch` iterations warms it up, then launches are timed one by one, each fenced on
both sides (Legate runs tasks asynchronously), until the candidate's share of the budget is
spent, at least MIN_TRIAL_LAUNCHES and at most MAX_LAUNCHES of them; its fastest launch counts
(this host's speed drifts; the fastest is the least disturbed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from flexflow.graph import OperatorGraph
from flexflow.optimizers import Optimizer
from flexflow.planning import MIN_TRIAL_LAUNCHES, Candidate
from flexflow.runtime.executor import Executor
from flexflow.runtime.loss import loss_name

MAX_LAUNCHES = 8


def synthetic_batch(graph: OperatorGraph, loss: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One batch of inputs and its target for `loss`, drawn as real data spreads: normal
    floats, token ids over their vocabulary (a gather of one row would be faster than real
    text's), labels over the classes (or their one-hot distributions, or normal targets for
    mean squared error)."""
    rng = np.random.default_rng(0)
    inputs = {
        t.name: rng.standard_normal(t.spec.shape).astype(np.float32)
        if t.spec.dtype.is_float
        else rng.integers(0, graph.token_vocabulary(t.id), t.spec.shape).astype(np.int32)
        for t in graph.input_tensors
    }
    output = graph.ops[-1].sig.outputs[0].shape
    name = loss_name(loss)
    labels = rng.integers(0, output[-1], output[:-1])
    if name == "sparse_categorical_crossentropy":
        return inputs, labels
    if name == "categorical_crossentropy":
        return inputs, np.eye(output[-1], dtype=np.float32)[labels]
    return inputs, rng.standard_normal(output).astype(np.float32)


def timed_iterations(
    executor: Executor, inputs: Mapping[str, np.ndarray], target, loss: str, iterations: int
) -> tuple[float, float]:
    """(start, end) perf_counter seconds of `iterations` training iterations issued back to
    back as `fit` issues them: every task before them has finished when they start, and every
    task of theirs when they end."""
    executor.runtime.issue_execution_fence(block=True)
    begin = time.perf_counter()
    executor.train_batches([(inputs, target, None)] * iterations, loss)[-1].read()
    executor.runtime.issue_execution_fence(block=True)
    return begin, time.perf_counter()


def time_candidates(
    graph: OperatorGraph,
    candidates: Sequence[Candidate],
    budget_s: float,
    *,
    loss: str,
    optimizer: Optimizer,
    steps_per_execution: int,
    seed: int,
) -> list[float]:
    """Seconds per training iteration of each candidate's strategy (see the module doc),
    within about `budget_s` in all (each candidate's warm-up aside)."""
    inputs, target = synthetic_batch(graph, loss)
    share = budget_s / len(candidates)
    measured = []
    for candidate in candidates:
        with Executor(
            graph,
            candidate.strategy,
            seed=seed,
            optimizer=optimizer,
            steps_per_execution=steps_per_execution,
        ) as executor:
            launch = executor.steps_per_launch
            timed_iterations(executor, inputs, target, loss, launch)  # warm-up
            launches: list[float] = []
            spent = 0.0
            while len(launches) < MIN_TRIAL_LAUNCHES or (
                spent < share and len(launches) < MAX_LAUNCHES
            ):
                begin, end = timed_iterations(executor, inputs, target, loss, launch)
                launches.append((end - begin) / launch)
                spent += end - begin
        measured.append(min(launches))
    return measured
