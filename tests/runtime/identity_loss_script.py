"""Run in a Legate process by test_identity_loss.py: models whose output is their own loss (a
reduce_sum to (sample,), a (sample, k) and a (sample, h, k) output) trained with the identity
loss under one device, data-parallel, random and attribute-splitting strategies; prints, as JSON,
`numerics_script.run`'s report of how far each is from one device and from numpy."""

from __future__ import annotations

import json
import sys

import numpy as np
from numerics_script import run  # (this folder: the script runs from it; imports flexflow first)

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.ops import DimKind
from flexflow.strategy import ParallelConfig, Strategy


def summed() -> FFModel:
    """FlexFlow's examples/python/keras/identity_loss.py: Dense, then a sum to (sample,)."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 6), name="x")
    model.reduce_sum(model.dense(x, 10, ActiMode.AC_MODE_RELU), axes=[1])
    return model


def rows() -> FFModel:
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 6), name="x")
    model.dense(model.dense(x, 10, ActiMode.AC_MODE_TANH), 4, ActiMode.AC_MODE_SIGMOID)
    return model


def sequence() -> FFModel:
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 4, 6), name="x")
    model.dense(model.dense(x, 8, ActiMode.AC_MODE_TANH), 4)
    return model


def attribute_splits(graph, machine) -> list[tuple[str, Strategy]]:
    """Every op split in two along its last non-sample dimension that two divides (the output
    op's loss tasks then hold a column block each), else by sample; and the same with the output
    op alone split so, the rest on device 0."""
    devices = tuple(range(min(2, machine.num_devices)))

    def split(node) -> ParallelConfig:
        degrees = [1] * len(node.sig.output_shape)
        kinds = [d.kind for d in node.sig.dims]
        for i in reversed(range(len(degrees))):
            if kinds[i] is not DimKind.SAMPLE and node.sig.output_shape[i] % len(devices) == 0:
                degrees[i] = len(devices)
                break
        else:
            degrees[0] = len(devices)
        return ParallelConfig(tuple(degrees), devices)

    names = tuple(n.name for n in graph.ops)
    every = Strategy(names, tuple(split(n) for n in graph.ops))
    last = Strategy(
        names,
        tuple(
            split(n)
            if i == len(graph.ops) - 1
            else ParallelConfig.single(len(n.sig.output_shape), 0)
            for i, n in enumerate(graph.ops)
        ),
    )
    return [("attribute", every), ("attribute output", last)]


if __name__ == "__main__":
    report = {
        name: run(build, "identity", more=attribute_splits)
        for name, build in (("summed", summed), ("rows", rows), ("sequence", sequence))
    }
    print(json.dumps(report, default=lambda v: np.asarray(v).tolist()))
    sys.stdout.flush()
