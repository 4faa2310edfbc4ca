"""Run in a Legate process by test_step_launches.py: the same training one step per launch and
several steps per launch (flexflow.runtime.step_launches), and the cases that cannot launch
several."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.errors import FlexFlowError
from flexflow.launches import iteration_tasks
from flexflow.machine import parse_machine
from flexflow.optimizers import AdamOptimizer, SGDOptimizer
from flexflow.runtime import Executor
from flexflow.runtime.passes import Pass
from flexflow.strategies import data_parallel_over, named_strategy
from flexflow.strategy import ParallelConfig, Strategy

LOSS = "sparse_categorical_crossentropy"
BATCH, FEATURES, CLASSES, STEPS, K = 16, 20, 6, 7, 3


def classifier():
    model = FFModel(FFConfig(batch_size=BATCH))
    x = model.create_tensor((BATCH, FEATURES), name="x")
    x = model.dense(x, 24, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(x, CLASSES))
    return model.graph()


def batches(count: int = STEPS) -> list:
    """`count` batches, the last padded (5 samples short)."""
    rng = np.random.default_rng(7)
    return [
        (
            {"x": rng.standard_normal((BATCH, FEATURES)).astype(np.float32)},
            rng.integers(0, CLASSES, BATCH),
            BATCH - 5 if step == count - 1 else None,
        )
        for step in range(count)
    ]


def train(graph, strategy, optimizer, schedule: str, timeline: bool = False, **options) -> dict:
    """Train on `batches()`: "one" a train_batch each, "launches" all through train_batches
    (K per launch where it can), "mixed" one step, then K + 1 through train_batches, then one
    step and an evaluation, then the rest through train_batches."""
    data = batches()
    with Executor(
        graph, strategy, optimizer=optimizer, record_timeline=timeline, **options
    ) as executor:
        if schedule == "one":
            stats = [executor.train_batch(x, y, LOSS, valid) for x, y, valid in data]
        elif schedule == "launches":
            stats = executor.train_batches(data, LOSS)
        else:
            stats = [executor.train_batch(*data[0][:2], LOSS, data[0][2])]
            stats += executor.train_batches(data[1 : K + 2], LOSS)
            stats += [executor.train_batch(*data[K + 2][:2], LOSS, data[K + 2][2])]
            executor.eval_batch(*data[0][:2], LOSS).read()
            stats += executor.train_batches(data[K + 3 :], LOSS)
        losses = [s.read() for s in stats]
        weights = {name: value.tolist() for name, value in executor.get_weights().items()}
        entries = executor.timeline or []
        threads: dict[int, list[int]] = {}
        for _, index, which, _, _, thread in entries:
            if int(which) == int(Pass.FUSED_STEP):
                threads.setdefault(index, []).append(int(thread))
        return {
            "losses": losses,
            "weights": weights,
            "per_launch": executor.steps_per_launch,
            "reason": executor.step_launch if isinstance(executor.step_launch, str) else None,
            "tasks": executor.tasks_issued,
            "iteration": executor.iteration,
            "steps_timed": sum(int(e[2]) == int(Pass.FUSED_STEP) for e in entries),
            "updates_timed": sum(int(e[2]) == int(Pass.UPDATE) for e in entries),
            "threads": {str(i): sorted(set(t)) for i, t in threads.items()},
            "described": executor.describe_kernels(),
            # what the planner's simulation assumes fit does (flexflow.launches)
            "planned_per_launch": iteration_tasks(
                graph,
                strategy,
                executor.device_kinds,
                executor.feeds.staging,
                sparse_labels=True,
                steps_per_execution=options.get("steps_per_execution", 1),
            ).steps_per_launch,
        }


def reversed_devices(strategy: Strategy) -> Strategy:
    """Data parallelism with the batch's halves on the devices the other way round."""
    configs = tuple(
        dataclasses.replace(c, devices=tuple(reversed(c.devices))) for c in strategy.configs
    )
    return Strategy(strategy.ops, configs)


def on_devices(graph, devices: tuple[int, ...]) -> Strategy:
    """Data parallelism over `devices` (a sample split per device)."""
    configs = []
    for node in graph.ops:
        rank = len(node.sig.output_shape)
        degrees = (len(devices),) + (1,) * (rank - 1)
        configs.append(ParallelConfig(degrees, devices))
    return Strategy(tuple(n.name for n in graph.ops), tuple(configs))


def offset() -> dict:
    """On 4 CPUs, data parallelism over the last two: a launch on processors 2 and 3."""
    graph = classifier()
    strategy = on_devices(graph, (2, 3))
    sgd = SGDOptimizer(0.05, momentum=0.9)
    return {
        "one": train(graph, strategy, sgd, "one", timeline=True),
        "launches": train(graph, strategy, sgd, "launches", timeline=True, steps_per_execution=K),
        "first_two": train(graph, on_devices(graph, (0, 1)), sgd, "one", timeline=True),
    }


def grouping_property(seed: int, examples: int) -> dict:
    """Hypothesis (seeded by the test): for any steps per launch, number of batches, padding of
    the last batch and optimizer, data parallelism on 2 CPUs trains to the same losses and
    weights as one step per launch, then evaluates the batches (as many per launch) to the
    same losses and correct counts as one per launch."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as with_seed
    from hypothesis import strategies as st

    graph = classifier()
    dp = named_strategy("dp", graph, parse_machine("local"))
    pool = batches(9)
    checked = []

    def run(data, optimizer, per_launch):
        with Executor(graph, dp, optimizer=optimizer, steps_per_execution=per_launch) as executor:
            losses = [s.read() for s in executor.train_batches(data, LOSS)]
            tasks = executor.tasks_issued
            weights = {k: v.tolist() for k, v in executor.get_weights().items()}
            # then the same batches evaluated (per_launch in each launch, as `eval` runs them)
            began = executor.tasks_issued
            evaluated = [s.read() for s in executor.eval_batches(data, LOSS)]
            return losses, weights, tasks, evaluated, executor.tasks_issued - began

    @with_seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        per_launch=st.integers(2, 6),
        count=st.integers(1, len(pool)),
        short=st.integers(0, BATCH - 1),
        adam=st.booleans(),
    )
    def same_numbers(per_launch, count, short, adam):
        data = [(x, y, None) for x, y, _ in pool[:count]]
        x, y, _ = data[-1]
        data[-1] = (x, y, BATCH - short)
        optimizer = AdamOptimizer(0.01) if adam else SGDOptimizer(0.05, momentum=0.9)
        one = run(data, optimizer, 1)
        many = run(data, optimizer, per_launch)
        assert many[0] == one[0], f"losses differ: {many[0]} against {one[0]}"
        assert many[1] == one[1], "weights differ"
        assert many[2] == -(-count // per_launch), f"{many[2]} launches for {count} steps"
        assert many[3] == one[3], f"evaluations differ: {many[3]} against {one[3]}"
        assert many[4] == -(-count // per_launch), f"{many[4]} launches for {count} evaluations"
        checked.append((per_launch, count, short, adam))

    try:
        same_numbers()
    except AssertionError as error:
        return {"ok": False, "error": str(error), "checked": checked}
    return {"ok": True, "checked": checked}


def main() -> None:
    if sys.argv[1:] == ["offset"]:
        print(json.dumps(offset()))
        return
    if sys.argv[1:2] == ["property"]:
        print(json.dumps(grouping_property(int(sys.argv[2]), int(sys.argv[3]))))
        return
    report: dict = {}
    graph = classifier()
    dp = named_strategy("dp", graph, parse_machine("local"))
    optimizers = {
        "sgd": SGDOptimizer(0.05, momentum=0.9, weight_decay=1e-3),
        "adam": AdamOptimizer(0.01),
    }
    for name, strategy in (("dp", dp), ("single", data_parallel_over(graph, 1))):
        for kind, optimizer in optimizers.items():
            report[f"{name}/{kind}"] = {
                "one": train(graph, strategy, optimizer, "one"),
                "launches": train(graph, strategy, optimizer, "launches", steps_per_execution=K),
                "mixed": train(graph, strategy, optimizer, "mixed", steps_per_execution=K),
                "timeline": train(
                    graph, strategy, optimizer, "mixed", timeline=True, steps_per_execution=K
                ),
                "one_timeline": train(graph, strategy, optimizer, "one", timeline=True),
            }
    sgd = optimizers["sgd"]
    report["reversed"] = train(graph, reversed_devices(dp), sgd, "launches", steps_per_execution=K)
    report["reversed_one"] = train(graph, reversed_devices(dp), sgd, "one")
    report["python_bodies"] = train(
        graph, dp, sgd, "launches", steps_per_execution=K, cpp_steps=False
    )
    report["mse"] = {}
    for per_launch in (1, K):
        with Executor(graph, dp, steps_per_execution=per_launch) as executor:
            x, y, _ = batches()[0]
            target = np.eye(CLASSES, dtype=np.float32)[y]
            stats = executor.train_batches([(x, target, None)] * 2, "mean_squared_error")
            report["mse"][str(per_launch)] = [s.read() for s in stats]
    report["bad"] = {}
    for value in (0, -2, 2.5):
        try:
            Executor(graph, dp, steps_per_execution=value)
            report["bad"][str(value)] = "no error"
        except FlexFlowError as error:
            report["bad"][str(value)] = str(error)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
