"""C op kernels against the numpy reference kernels, side by side on the same tensors.

For each case the forward and backward pass of the whole tensor as one tile: the numpy
reference (`op.forward`/`op.backward`) and the runtime's path (`op.forward_tile`/`backward_tile`,
C where the op has a C kernel). Prints seconds (best of REPEATS) and the ratio.

    .venv/bin/python benchmarks/kernels.py
"""

from __future__ import annotations

import time

import numpy as np
from results_io import no_options

from flexflow.ops import TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.pool2d import Pool2D, PoolType

SHAPE = (32, 64, 56, 56)  # ResNet's first pooling at batch 32
REPEATS = 3
CASES = {
    "max pool 3x3/2": Pool2D(3, 3, 2, 2, 1, 1, PoolType.POOL_MAX),
    "avg pool 3x3/2": Pool2D(3, 3, 2, 2, 1, 1, PoolType.POOL_AVG),
}


def best(run) -> float:
    times = []
    for _ in range(REPEATS):
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return min(times)


def compare(label: str, op: Pool2D, x: np.ndarray) -> None:
    sig = op.infer("pool", [TensorSpec(x.shape)])
    region = full_region(sig.output_shape)
    (y,) = op.forward([x], [])
    dy = np.ones_like(y)
    rows = (
        ("forward", lambda: op.forward([x], []), lambda: op.forward_tile(sig, region, [x], [])),
        ("backward", lambda: op.backward([x], [], [y], [dy]),
         lambda: op.backward_tile(sig, region, [x], [], [y], [dy])),
    )  # fmt: skip
    for name, reference, native in rows:
        ref_s, c_s = best(reference), best(native)
        print(f"{label:<16} {name:<9} {ref_s:8.3f} {c_s:8.3f} {ref_s / c_s:7.1f}x")


def main() -> None:
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    print(f"{'case':<16} {'pass':<9} {'numpy s':>8} {'C s':>8} {'numpy/C':>8}")
    for label, op in CASES.items():
        compare(label, op, x)


if __name__ == "__main__":
    no_options(__doc__)
    main()
