"""Run in a Legate process by test_native_tasks.py: the same training with step tasks in C++
bodies and in Python bodies (a run recording a timeline keeps Python bodies), and labels that
reach the C++ step as Legate stores."""

from __future__ import annotations

import json

import numpy as np

import flexflow  # noqa: F401  (first: prepares Legate)
from flexflow import ActiMode, FFConfig, FFModel
from flexflow.errors import ShapeError
from flexflow.launches import iteration_tasks
from flexflow.machine import parse_machine
from flexflow.optimizers import AdamOptimizer, SGDOptimizer
from flexflow.runtime import Executor
from flexflow.runtime.passes import Pass
from flexflow.strategies import named_strategy
from flexflow.strategy import ParallelConfig, Strategy

LOSS = "sparse_categorical_crossentropy"
BATCH, FEATURES, CLASSES, STEPS = 16, 20, 6, 6


def classifier(flat: bool):
    model = FFModel(FFConfig(batch_size=BATCH))
    shape = (BATCH, 1, 4, 5) if flat else (BATCH, FEATURES)
    x = model.create_tensor(shape, name="x")
    if flat:
        x = model.flat(x)
    x = model.dense(x, 24, ActiMode.AC_MODE_RELU)
    model.softmax(model.dense(x, CLASSES))
    return model.graph(), shape


def train(graph, shape, strategy, optimizer, cpp: bool, labels=None, timeline=False):
    """Losses per step (the last batch padded), the weights, the C++ step tasks issued and the
    timeline's step and update entries."""
    rng = np.random.default_rng(7)
    batches = [
        (rng.standard_normal(shape).astype(np.float32), rng.integers(0, CLASSES, BATCH))
        for _ in range(STEPS)
    ]
    losses = []
    with Executor(
        graph, strategy, optimizer=optimizer, record_timeline=timeline, cpp_steps=cpp
    ) as executor:
        for step, (x, y) in enumerate(batches):
            target = y if labels is None else labels(y)
            valid = BATCH - 5 if step == STEPS - 1 else None
            losses.append(executor.train_batch({"x": x}, target, LOSS, valid).read())
        weights = {name: value.tolist() for name, value in executor.get_weights().items()}
        kinds = [kind for kind, _ in parse_machine("local").kind_ordinals()]
        predicted = iteration_tasks(graph, strategy, kinds, sparse_labels=True).cpp_steps
        entries = executor.timeline or []
        inside = executor.step_ops_timeline or []
        # (op -1: an update applied inside a step; the last one runs in update tasks)
        passes = [(e[0], int(e[2])) for e in entries if e[3] <= e[4]]
        steps = [e for e in entries if int(e[2]) == int(Pass.FUSED_STEP)]
        # each op's pass inside a step lies within that step's entry, on its thread
        nested = all(
            any(s[5] == e[5] and s[3] <= e[3] <= e[4] <= s[4] for s in steps) for e in inside
        )
        first = steps[0] if steps else (0, 0, 0, 0.0, -1.0, 0)
        order = [
            (e[0], int(e[2]))
            for e in sorted(inside, key=lambda e: e[3])
            if e[5] == first[5] and first[3] <= e[3] <= first[4]
        ]
        programs = list(executor.native_steps.values())
        ops = [op.step.node.id for op in programs[0].program.ops] if programs else []
        return {
            "losses": losses,
            "weights": weights,
            "cpp": executor.cpp_steps_issued,
            "predicted_cpp_per_step": predicted,
            "steps_timed": sum(p == int(Pass.FUSED_STEP) for _, p in passes),
            "updates_timed": passes.count((-1, int(Pass.UPDATE))),
            "threads": len({e[5] for e in entries}),
            "inside": len(inside),
            "inside_nested": nested,
            "first_step_order": order,
            "first_step_in_order": order == in_order(ops),
            "ops": len(ops),
        }


def in_order(ops: list[int]) -> list[tuple[int, int]]:
    """A step's (op, pass) inside its C call, `ops` the program's ops: forwards in order, the
    loss (the last op's), backwards in reverse."""
    order = [(op, int(Pass.FORWARD)) for op in ops] + [(ops[-1], int(Pass.LOSS))] if ops else []
    return order + [(op, int(Pass.BACKWARD)) for op in reversed(ops)]


def one_device(graph) -> Strategy:
    return Strategy(
        tuple(n.name for n in graph.ops),
        tuple(ParallelConfig.single(len(n.sig.output_shape), 0) for n in graph.ops),
    )


def main() -> None:
    import cupynumeric  # after flexflow, which prepares Legate

    report = {}
    local = parse_machine("local")
    optimizers = {"sgd": SGDOptimizer(0.05, momentum=0.9), "adam": AdamOptimizer(0.01)}
    for flat in (False, True):
        graph, shape = classifier(flat)
        for name in ("dp", "single"):
            strategy = named_strategy(name, graph, local) if name == "dp" else one_device(graph)
            for kind, optimizer in optimizers.items():
                runs = {
                    "cpp": train(graph, shape, strategy, optimizer, True),
                    "python": train(graph, shape, strategy, optimizer, False),
                    "cpp_timeline": train(graph, shape, strategy, optimizer, True, timeline=True),
                    "int64_store": train(graph, shape, strategy, optimizer, True, cupynumeric.asarray),
                    "int32_store": train(
                        graph, shape, strategy, optimizer, True,
                        lambda y: cupynumeric.asarray(y.astype(np.int32)),
                    ),
                }  # fmt: skip
                report[f"{'flat' if flat else 'dense'}/{name}/{kind}"] = runs
    graph, shape = classifier(False)
    strategy = named_strategy("dp", graph, local)
    with Executor(graph, strategy) as executor:
        x = np.zeros(shape, np.float32)
        bad = cupynumeric.asarray(np.full(BATCH, CLASSES, dtype=np.int64))
        try:
            executor.train_batch({"x": x}, bad, LOSS).read()
            report["out_of_range"] = "no error"
        except ShapeError as error:
            report["out_of_range"] = str(error)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
