"""Convolution tiles on one core: the direct kernels (native/conv.c) against im2col + GEMM.

Both paths of flexflow.ops.conv2d on the same float32 tensors, one BLAS thread (a Legate CPU
processor is one core), taking turns: the forward (z = conv(x)), the input's gradient and the
kernel's gradient. The im2col backward reuses the forward's columns, as a step task does; each
figure is the median of ROUNDS rounds of the best of a few calls. The shapes span small images
with few channels (a small ResNet on 28x28 digits, LeNet's first convolution) to ResNet-101's
narrow maps with many channels; the rule that picks the direct kernels (`ff_conv_direct`)
is read off this table: stride 1, one group, at most FF_CONV_DIRECT_MAX_OUT output
channels, at most FF_CONV_DIRECT_MAX_CELLS products per output where 3/4 of a padded row's
values are outputs, twice as many where 17/20 are. Results: benchmarks/results/conv.{md,csv}.

    .venv/bin/python benchmarks/conv.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from results_io import RESULTS, write_csv, write_markdown
from threadpoolctl import threadpool_limits

from flexflow._kernels import lib
from flexflow.cli_args import positive_int
from flexflow.ops import ActiMode
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.native_windows import ConvWindow

# (label, samples, channels, image, out channels, kernel, padding)
SHAPES = (
    ("small ResNet 16ch, 28x28", 32, 16, 28, 16, 3, 1),
    ("small ResNet stem, 28x28", 32, 1, 28, 16, 3, 1),
    ("LeNet conv1, 28x28", 32, 1, 28, 20, 5, 0),
    ("32ch, 16x16", 32, 32, 16, 32, 3, 1),
    ("RGB stem 64ch, 32x32", 32, 3, 32, 64, 3, 1),
    ("64ch, 32x32", 16, 64, 32, 64, 3, 1),
    ("64ch, 16x16", 32, 64, 16, 64, 3, 1),
    ("128ch, 32x32", 8, 128, 32, 128, 3, 1),
    ("128ch, 16x16", 16, 128, 16, 128, 3, 1),
    ("128ch, 12x12", 16, 128, 12, 128, 3, 1),
    ("256ch, 16x16", 8, 256, 16, 256, 3, 1),
    ("LeNet conv2, 12x12", 32, 20, 12, 50, 5, 0),
    ("32ch, 8x8", 32, 32, 8, 32, 3, 1),
    ("64ch, 8x8", 32, 64, 8, 64, 3, 1),
    ("256ch, 8x8", 8, 256, 8, 256, 3, 1),
    ("128ch, 4x4", 8, 128, 4, 128, 3, 1),
    ("ResNet-101 64ch, 8x8", 8, 64, 8, 64, 3, 1),
    ("ResNet-101 256ch, 4x4", 8, 256, 4, 256, 3, 1),
)


def best_ms(run, calls: int = 3) -> float:
    run()  # warm: the arrays' pages and the caches
    times = []
    for _ in range(calls):
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return min(times) * 1e3


def measure(label, n, c, image, o, k, p, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, image, image)).astype(np.float32)
    kernel = rng.standard_normal((o, c, k, k)).astype(np.float32)
    conv = Conv2D(o, k, k, 1, 1, p, p, ActiMode.AC_MODE_NONE, 1, False)
    z, cols = conv._im2col_pre_activation(x, [kernel])
    dz = rng.standard_normal(z.shape).astype(np.float32)
    window = ConvWindow(x.shape, o, z.shape[2:], (k, k), (p, p))
    paths = {
        "im2col forward": lambda: conv._im2col_pre_activation(x, [kernel]),
        "im2col backward": lambda: conv._im2col_backward(x, kernel, dz, cols, True, [None, None]),
        "direct forward": lambda: window.forward(x, kernel, None),
        "direct dx": lambda: window.input_grad(dz, kernel),
        "direct dw": lambda: window.kernel_grad(x, dz),
    }
    samples: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):  # the paths take turns, so a slow spell of the host hits both
        for name, run in paths.items():
            samples[name].append(best_ms(run))
    ms = {name: statistics.median(values) for name, values in samples.items()}
    im2col = ms["im2col forward"] + ms["im2col backward"]
    direct = ms["direct forward"] + ms["direct dx"] + ms["direct dw"]
    return {
        "shape": label,
        "n c h o k": f"{n} {c} {image} {o} {k}",
        "products per output": c * k * k,
        "gflop": round(6 * n * o * c * k * k * z.shape[2] * z.shape[3] / 1e9, 3),
        "im2col forward ms": round(ms["im2col forward"], 3),
        "direct forward ms": round(ms["direct forward"], 3),
        "im2col backward ms": round(ms["im2col backward"], 3),
        "direct backward ms": round(ms["direct dx"] + ms["direct dw"], 3),
        "im2col / direct": round(im2col / direct, 2),
        "rule picks": "direct"
        if ConvWindow.takes(x.shape, o, z.shape[2:], (k, k), (1, 1), (p, p), 1)
        else "im2col",  # fmt: skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--out", default="conv", help="results file stem in benchmarks/results")
    args = parser.parse_args()
    rows = []
    with threadpool_limits(1, user_api="blas"):
        for shape in SHAPES:
            rows.append(measure(*shape, args.rounds))
            print(", ".join(f"{key} {value}" for key, value in rows[-1].items()), flush=True)
    isa = ["x86-64 baseline", "AVX2", "AVX-512"][max(ConvWindow.isas())]
    lines = [
        "# Convolution tiles on one core: direct kernels against im2col + GEMM",
        "",
        f"`.venv/bin/python benchmarks/conv.py --rounds {args.rounds}` (direct kernels on "
        f"{isa}; rule: stride 1, one group, at most {lib.FF_CONV_DIRECT_MAX_OUT} output "
        f"channels, at most {lib.FF_CONV_DIRECT_MAX_CELLS} products per output where 3/4 of a "
        "padded row's values are outputs, twice as many where 17/20 are). "
        "Float32, stride 1, no bias; the im2col "
        "backward reuses the forward's columns; each figure the median over the rounds of "
        'the best of 3 calls, the paths taking turns; "im2col / direct" the ratio of the '
        "forward and backward together.",
        "",
        "| " + " | ".join(rows[0]) + " |",
        "|" + "---|" * len(rows[0]),
        *("| " + " | ".join(str(value) for value in row.values()) + " |" for row in rows),
    ]
    write_markdown(RESULTS / f"{args.out}.md", lines)
    write_csv(RESULTS / f"{args.out}.csv", rows)
    print(f"wrote {RESULTS / args.out}.md and .csv")


if __name__ == "__main__":
    main()
