"""GPU kernels against the numpy references, value by value: what `scripts/gpu_check.py` and the GPU
tests run. Also times a few GEMM and convolution sizes (measured op costs on this GPU).

The error of an array is max |gpu - numpy| / max(max |numpy|, 1e-2): relative to the array's
scale, so an element near zero does not dominate, and absolute for arrays that are zero in exact
arithmetic (attention's key-bias gradient); float32 kernels pass below `TOLERANCE`.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from flexflow.gpu import tiles, training
from flexflow.gpu.cases import IMAGE, TileCase, tile_data
from flexflow.gpu.device import DeviceArray, Gpu
from flexflow.ops.batch_norm import BatchNorm
from flexflow.optimizers import AdamOptimizer, SGDOptimizer

TOLERANCE = 1e-4
"""Largest relative error a float32 kernel may have against the float64 numpy reference."""
SCALE_FLOOR = 1e-2
"""Arrays smaller than this (in max norm) are compared absolutely."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """One output or gradient of one check."""

    check: str
    what: str
    max_rel_error: float
    exact: bool
    tolerance: float = TOLERANCE
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.max_rel_error <= self.tolerance

    def to_json(self) -> dict:
        return {
            "check": self.check,
            "what": self.what,
            "max_rel_error": self.max_rel_error,
            "exact": self.exact,
            "tolerance": self.tolerance,
            "ok": self.ok,
            "note": self.note,
        }


def compare(check: str, what: str, got: np.ndarray | None, want: np.ndarray | None) -> Comparison:
    if got is None or want is None:
        same = got is None and want is None
        return Comparison(
            check, what, 0.0 if same else math.inf, same, note="" if same else "None mismatch"
        )
    want = np.asarray(want)
    if got.shape != want.shape:
        return Comparison(check, what, math.inf, False, note=f"shape {got.shape} != {want.shape}")
    if want.size == 0:
        return Comparison(check, what, 0.0, True)
    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    error = float(np.max(diff)) / max(float(np.max(np.abs(want))), SCALE_FLOOR)
    exact = bool(np.array_equal(got, want.astype(got.dtype)))
    return Comparison(check, what, error if np.isfinite(error) else math.inf, exact)


def _to_device(gpu: Gpu, array: np.ndarray) -> DeviceArray:
    if array.dtype.kind == "f":
        array = array.astype(np.float32)
    return gpu.to_device(array)


def _host(gpu: Gpu, array: DeviceArray | None) -> np.ndarray | None:
    return None if array is None else gpu.to_host(array)


def check_tile(gpu: Gpu, case: TileCase) -> list[Comparison]:
    """The case's forward and backward tile on the GPU against `forward_tile`/`backward_tile`."""
    data = tile_data(case)
    op = case.op
    ref_out = op.forward_tile(data.sig, data.region, data.inputs, data.weights)
    ref_gx, ref_gw = op.backward_tile(
        data.sig, data.region, data.inputs, data.weights, ref_out, data.grad_outputs
    )
    xs = [_to_device(gpu, x) for x in data.inputs]
    ws = [_to_device(gpu, w) for w in data.weights]
    outs = tiles.forward_tile(gpu, op, data.sig, data.region, xs, ws)
    results = [
        compare(case.name, f"output {i}", _host(gpu, o), r)
        for i, (o, r) in enumerate(zip(outs, ref_out, strict=True))
    ]
    # the backward pass gets the reference's outputs, so its errors are its own
    ys = [_to_device(gpu, o) for o in ref_out]
    dys = [_to_device(gpu, g) for g in data.grad_outputs]
    gx, gw = tiles.backward_tile(gpu, op, data.sig, data.region, xs, ws, ys, dys)
    for label, got, want in (("input", gx, ref_gx), ("weight", gw, ref_gw)):
        for i, (g, r) in enumerate(zip(got, want, strict=True)):
            results.append(compare(case.name, f"grad {label} {i}", _host(gpu, g), r))
    return results


def check_batch_norm_statistics(gpu: Gpu) -> list[Comparison]:
    """A sample-split batch-norm tile with the whole batch's statistics (the runtime's protocol)."""
    op = BatchNorm(relu=True)
    case = TileCase("batch_norm statistics", op, IMAGE, (2, 1, 1, 1), (1, 0, 0, 0))
    sig = case.signature()
    rng = np.random.default_rng(3)
    x = rng.standard_normal(sig.inputs[0].shape).astype(np.float32).astype(np.float64)
    weights = [rng.uniform(0.5, 1.5, (4,)), rng.standard_normal(4)]
    weights = [w.astype(np.float32).astype(np.float64) for w in weights]
    stats = op.statistics_forward(x)  # the sums every tile added
    y = op.forward_tile_with_statistics(sig, x, weights, stats)[0]
    dy = rng.standard_normal(y.shape).astype(np.float32).astype(np.float64)
    grad_stats = op.statistics_backward(sig, x, weights, y, dy, stats)
    tile = slice(2, 4)  # the second half of the samples
    x_t, y_t, dy_t = x[tile], y[tile], dy[tile]
    ref_stats = op.statistics_forward(x_t)
    ref_y = op.forward_tile_with_statistics(sig, x_t, weights, stats)[0]
    ref_partial = op.statistics_backward(sig, x_t, weights, y_t, dy_t, stats)
    (ref_dx,), ref_gw = op.backward_tile_with_statistics(
        sig, x_t, weights, y_t, dy_t, stats, grad_stats
    )
    d = {name: _to_device(gpu, a) for name, a in (("x", x_t), ("y", y_t), ("dy", dy_t))}
    ws = [_to_device(gpu, w) for w in weights]
    d_stats, d_grad_stats = gpu.to_device(stats), gpu.to_device(grad_stats)
    name = case.name
    results = [
        compare(name, "statistics_forward", _host(gpu, tiles.statistics_forward(gpu, op, d["x"])), ref_stats),
        compare(
            name, "forward_tile_with_statistics",
            _host(gpu, tiles.forward_tile_with_statistics(gpu, op, sig, d["x"], ws, d_stats)[0]), ref_y,
        ),
        compare(
            name, "statistics_backward",
            _host(gpu, tiles.statistics_backward(gpu, op, sig, d["x"], ws, d["y"], d["dy"], d_stats)),
            ref_partial,
        ),
    ]  # fmt: skip
    (dx,), gw = tiles.backward_tile_with_statistics(
        gpu, op, sig, d["x"], ws, d["y"], d["dy"], d_stats, d_grad_stats
    )
    results.append(compare(name, "backward dx", _host(gpu, dx), ref_dx))
    for i, (g, r) in enumerate(zip(gw, ref_gw, strict=True)):
        results.append(compare(name, f"backward grad weight {i}", _host(gpu, g), r))
    return results


OPTIMIZERS = (
    (SGDOptimizer(0.1), 0.0),
    (SGDOptimizer(0.05, momentum=0.9, weight_decay=1e-3), 0.0),
    (SGDOptimizer(0.05, momentum=0.9, weight_decay=1e-3, nesterov=True), 0.0),
    (AdamOptimizer(1e-3), 0.0),
    (AdamOptimizer(1e-2, beta1=0.8, beta2=0.99, weight_decay=1e-2), 0.0),
    # a parameter with an L2 regularizer (flexflow.regularizers), alone and with weight decay
    (SGDOptimizer(0.05, momentum=0.9), 3e-2),
    (AdamOptimizer(1e-2, weight_decay=1e-2), 5e-2),
)
"""Each optimizer checked, with the L2 lambda of the parameter it updates."""


def check_optimizers(gpu: Gpu) -> list[Comparison]:
    """Three updates of each optimizer on the GPU against `Optimizer.update` (float32, exact order)."""
    results = []
    rng = np.random.default_rng(4)
    for optimizer, l2 in OPTIMIZERS:
        name = f"{type(optimizer).__name__}({optimizer.to_json()}, l2={l2})"
        weight = rng.standard_normal((5, 7)).astype(np.float32)
        states = [np.zeros_like(weight) for _ in optimizer.state_names]
        d_weight, d_states = gpu.to_device(weight), [gpu.to_device(s) for s in states]
        for step in (1, 2, 3):
            grad = rng.standard_normal(weight.shape).astype(np.float32)
            weight, states = optimizer.update(weight, grad, states, step, l2)
            d_weight, d_states = training.update(
                gpu, optimizer, d_weight, gpu.to_device(grad), d_states, step, l2
            )
        results.append(compare(name, "weight after 3 steps", gpu.to_host(d_weight), weight))
        for state_name, got, want in zip(optimizer.state_names, d_states, states, strict=True):
            results.append(compare(name, f"state {state_name}", gpu.to_host(got), want))
    return results


def load_loss_reference(repo: Path) -> ModuleType:
    """flexflow/runtime/loss.py as its own module: importing it through `flexflow.runtime` would
    start Legate, and the losses themselves (flexflow.runtime.loss_functions, which it imports)
    need only numpy. It is registered under its own name before it runs, as a dataclass defined
    in it (`LossKind`) looks its module up there."""
    path = repo / "flexflow" / "runtime" / "loss.py"
    spec = importlib.util.spec_from_file_location("flexflow_loss_reference", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _loss_inputs(
    rng: np.random.Generator, name: str, label_dtype: str, positions: tuple[int, ...] = ()
) -> tuple[np.ndarray, np.ndarray]:
    """A tile of 6 samples (each with `positions` predictions, as a language model's) over 5
    classes, and its target."""
    predictions = (6, *positions)
    logits = rng.standard_normal((*predictions, 5))
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    probs = probs.astype(np.float32)
    if name == "sparse_categorical_crossentropy":
        return probs, rng.integers(0, 5, predictions).astype(label_dtype)
    if name == "categorical_crossentropy":
        return probs, np.eye(5, dtype=np.float32)[rng.integers(0, 5, predictions)]
    if name == "identity":  # without positions a (sample,) output; labels one (unread) a sample
        shape = (*predictions, 5) if positions else predictions
        return rng.standard_normal(shape).astype(np.float32), np.zeros(6, np.float32)
    shape = (*predictions, 5)
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(
        np.float32
    )


def check_losses(gpu: Gpu, loss_module: ModuleType) -> list[Comparison]:
    """Each loss on a tile (with padded rows past `valid`) against `loss.loss_tile`."""
    results = []
    rng = np.random.default_rng(5)
    cases = [
        ("mean_squared_error", "int32", ()),
        ("sparse_categorical_crossentropy", "int32", ()),
        ("sparse_categorical_crossentropy", "int64", ()),
        ("categorical_crossentropy", "int32", ()),
        # one prediction per position (sample, position, classes): per-token losses
        ("mean_squared_error", "int32", (3,)),
        ("sparse_categorical_crossentropy", "int32", (3,)),
        ("categorical_crossentropy", "int32", (3,)),
        ("identity", "int32", ()),  # the model's output is its loss: labels unread
        ("identity", "int32", (3,)),
    ]
    for name, label_dtype, positions in cases:
        prediction, target = _loss_inputs(rng, name, label_dtype, positions)
        loss_id = loss_module.LOSS_IDS.index(name)
        for valid in (6, 4):
            value, grad, correct = loss_module.loss_tile(loss_id, prediction, target, 12, valid)
            sums, d_grad = training.loss_tile(
                gpu, name, gpu.to_device(prediction), gpu.to_device(target), 12, valid
            )
            got = gpu.to_host(sums)
            kind = label_dtype if "sparse" in name else "float32"
            check = f"{name} ({kind}, {prediction.shape}, valid {valid}/6)"
            results.append(compare(check, "loss value", got[:1], np.array([value])))
            results.append(compare(check, "correct count", got[1:], np.array([float(correct)])))
            results.append(compare(check, "gradient", gpu.to_host(d_grad), grad))
    return results


def environment(gpu: Gpu) -> dict:
    """The device and library versions the results were measured with."""
    from flexflow.gpu.libraries import _OPENED, ffi

    def version(call) -> int | None:
        value = ffi.new("int *")
        try:
            return value[0] if call(value) == 0 else None
        except Exception:
            return None

    name = ffi.new("char[256]")
    driver, cudart = _OPENED["driver"], _OPENED["cudart"]
    driver.cuDeviceGetName(name, 256, gpu.device)
    facts = {
        "device": ffi.string(name).decode(errors="replace"),
        "arch": gpu.arch,
        "driver_version": version(driver.cuDriverGetVersion),
        "runtime_version": version(cudart.cudaRuntimeGetVersion),
    }
    if "cudnn" in _OPENED:
        facts["cudnn_version"] = int(_OPENED["cudnn"].cudnnGetVersion())
    return facts


def _time_ms(gpu: Gpu, run: Callable[[], object], repeats: int = 10) -> float:
    run()  # warm up: compile, choose algorithms, allocate
    gpu.synchronize()
    begin = time.perf_counter()
    for _ in range(repeats):
        run()
    gpu.synchronize()
    return (time.perf_counter() - begin) / repeats * 1e3


GEMM_SIZES = ((1024, 1024, 1024), (4096, 4096, 4096), (8192, 1024, 4096))
CONV_SIZES = (  # (N, C, H, W), out channels, kernel
    ((64, 64, 56, 56), 64, 3),
    ((64, 256, 14, 14), 256, 3),
    ((32, 3, 224, 224), 64, 7),
)


def time_kernels(gpu: Gpu, conv: bool) -> list[dict]:
    """Measured times of cuBLAS SGEMM and cuDNN convolutions (forward), ms and TFLOP/s."""
    from flexflow.gpu.blas import gemm

    timings = []
    for m, n, k in GEMM_SIZES:
        a, b, c = gpu.zeros((m, k)), gpu.zeros((k, n)), gpu.empty((m, n))
        ms = _time_ms(gpu, lambda a=a, b=b, c=c: gemm(gpu, a, b, out=c))
        flops = 2.0 * m * n * k
        timings.append(
            {"kernel": "sgemm", "shape": [m, n, k], "ms": ms, "tflops": flops / ms / 1e9}
        )
    if not conv:
        return timings
    from flexflow.gpu import dnn

    for x_shape, out_channels, kernel in CONV_SIZES:
        n, c, h, w = x_shape
        pad = kernel // 2
        shape = dnn.ConvShape(
            x_shape,
            (out_channels, c, kernel, kernel),
            (n, out_channels, h, w),
            (pad, pad),
            (1, 1),
            1,
        )
        x, wt, y = gpu.zeros(x_shape), gpu.zeros(shape.w), gpu.empty(shape.y)
        ms = _time_ms(gpu, lambda s=shape, x=x, wt=wt, y=y: dnn.conv_forward(gpu, s, x, wt, y))
        flops = 2.0 * n * out_channels * h * w * c * kernel * kernel
        timings.append(
            {
                "kernel": "conv2d forward",
                "shape": [list(x_shape), out_channels, kernel],
                "ms": ms,
                "tflops": flops / ms / 1e9,
            }
        )
    return timings


def run_cases(
    gpu: Gpu, cases: Sequence[TileCase], available: Callable[[tuple[str, ...]], bool]
) -> tuple[list[Comparison], list[str]]:
    """Every case whose libraries are available; the names of those skipped."""
    results, skipped = [], []
    for case in cases:
        if not available(tiles.GPU_TILES[case.op.kind].libraries):
            skipped.append(case.name)
            continue
        results.extend(run_guarded(case.name, lambda case=case: check_tile(gpu, case)))
    return results, skipped


def run_guarded(name: str, run: Callable[[], list[Comparison]]) -> list[Comparison]:
    """`run()`'s comparisons, or one failed comparison naming the error: one failing kernel must
    not hide the others' results."""
    try:
        return run()
    except Exception as error:
        return [Comparison(name, "ran", math.inf, False, note=f"{type(error).__name__}: {error}")]


def markdown(report: dict) -> str:
    """`scripts/gpu_check.py`'s report as markdown: the environment, the count within
    `TOLERANCE`, each check's worst error and bit-identical results, and the measured op costs."""
    results = report.get("results", [])
    env = report.get("environment", {})
    lines = [f"# GPU kernels against the numpy references: {env.get('device', 'no GPU')}", ""]
    if not results:
        return "\n".join(lines + ["Nothing checked."]) + "\n"
    lines += [
        f"{env.get('arch')}, driver API {env.get('driver_version')}, CUDA runtime "
        f"{env.get('runtime_version')}, cuDNN {env.get('cudnn_version')}; references' kernels: "
        f"{report.get('reference_kernels')}.",
        "",
    ]
    worst = max(r["max_rel_error"] for r in results)
    lines += [
        f"**{sum(r['ok'] for r in results)}/{len(results)} results within {TOLERANCE:g}** "
        "(max |gpu - numpy| / max |numpy|, the reference in float64), "
        f"{sum(r['exact'] for r in results)} bit-identical, worst {worst:.2e}; "
        f"{report.get('seconds', 0):.1f} s. Skipped: {', '.join(report.get('skipped', [])) or 'none'}.",
        "",
        "| check | results | worst relative error | bit-identical |",
        "| --- | ---: | ---: | ---: |",
    ]
    by_check: dict[str, list[dict]] = {}
    for r in results:
        by_check.setdefault(r["check"].split("(")[0].strip(), []).append(r)
    for name, rows in by_check.items():
        lines.append(
            f"| {name} | {len(rows)} | {max(r['max_rel_error'] for r in rows):.2e} | "
            f"{sum(r['exact'] for r in rows)} |"
        )
    lines += [
        "",
        "Measured op costs (FP32, no TF32; mean of 10 after a warm-up, on zeros):",
        "",
        "| kernel | shape | ms | TFLOP/s |",
        "| --- | --- | ---: | ---: |",
    ]
    lines += [
        f"| {t['kernel']} | {t['shape']} | {t['ms']:.3f} | {t['tflops']:.1f} |"
        for t in report.get("timings", [])
    ]
    return "\n".join(lines) + "\n"
