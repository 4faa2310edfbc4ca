"""Checks every op test uses: numerical gradients, and that an output tile depends only on its declared regions."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import numpy as np

from flexflow.ops import Op, Signature
from flexflow.ops.base import region_slices
from flexflow.ops.init import initialize
from flexflow.ops.shapes import tile_region


def random_inputs(sig: Signature, rng: np.random.Generator, high: int = 10) -> list[np.ndarray]:
    """float64 inputs for float tensors, integers in [0, high) for integer ones."""
    arrays = []
    for spec in sig.inputs:
        if spec.dtype.is_float:
            arrays.append(rng.standard_normal(spec.shape))
        else:
            arrays.append(rng.integers(0, high, spec.shape).astype(spec.dtype.value))
    return arrays


def random_weights(sig: Signature, rng: np.random.Generator) -> list[np.ndarray]:
    """Initialized weights plus noise, so zero-initialized biases still get exercised."""
    return [
        initialize(w, rng, np.float64) + 0.1 * rng.standard_normal(w.shape) for w in sig.weights
    ]


def _loss(op: Op, inputs, weights, upstream) -> float:
    outputs = op.forward(inputs, weights)
    return float(sum(np.sum(o * g) for o, g in zip(outputs, upstream, strict=True)))


def numerical_gradient(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x, dtype=np.float64)
    flat = x.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        plus = f()
        flat[i] = old - eps
        minus = f()
        flat[i] = old
        grad.reshape(-1)[i] = (plus - minus) / (2 * eps)
    return grad


def assert_gradients(
    op: Op,
    inputs: Sequence[np.ndarray],
    weights: Sequence[np.ndarray],
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-7,
) -> None:
    """The op's backward equals central differences of sum(upstream * forward) for every float array."""
    rng = np.random.default_rng(seed)
    inputs = [np.array(a) for a in inputs]
    weights = [np.array(w, dtype=np.float64) for w in weights]
    outputs = op.forward(inputs, weights)
    upstream = [rng.standard_normal(o.shape) for o in outputs]
    grad_inputs, grad_weights = op.backward(inputs, weights, outputs, upstream)
    assert len(grad_inputs) == len(inputs) and len(grad_weights) == len(weights)
    for label, arrays, grads in (("input", inputs, grad_inputs), ("weight", weights, grad_weights)):
        for index, (array, grad) in enumerate(zip(arrays, grads, strict=True)):
            if not np.issubdtype(array.dtype, np.floating):
                assert grad is None, f"{op.kind}: gradient of integer {label} {index} must be None"
                continue
            expected = numerical_gradient(lambda: _loss(op, inputs, weights, upstream), array)
            assert grad is not None and grad.shape == array.shape, (
                f"{op.kind}: {label} {index} gradient shape {None if grad is None else grad.shape}"
                f" != {array.shape}"
            )
            np.testing.assert_allclose(
                grad, expected, rtol=rtol, atol=atol, err_msg=f"{op.kind} {label} {index}"
            )


def tilings(
    sig: Signature, max_tasks: int = 8, skip: tuple[str, ...] = ()
) -> Iterator[tuple[int, ...]]:
    """Every degree tuple over the partitionable dims (each degree divides its dim), up to `max_tasks` tasks.

    Dims named in `skip` stay whole.
    """
    choices = []
    for dim, size in zip(sig.dims, sig.output_shape, strict=True):
        if dim.partitionable and dim.name not in skip:
            choices.append(  # the tilings a strategy may hold (`Dim.fits`: grouped convs)
                [
                    d
                    for d in range(1, min(size, max_tasks) + 1)
                    if size % d == 0 and dim.fits(size, d)
                ]
            )
        else:
            choices.append([1])
    for degrees in itertools.product(*choices):
        if 1 < int(np.prod(degrees)) <= max_tasks:
            yield degrees


def assert_regions_sufficient(
    op: Op,
    sig: Signature,
    inputs: Sequence[np.ndarray],
    weights: Sequence[np.ndarray],
    seed: int = 0,
    max_tilings: int = 12,
) -> int:
    """Each output tile is unchanged when every input and weight element outside its regions is scrambled.

    Splits of an op's `statistics_dims` are left out: those tiles depend on the other tiles
    through the declared all-reduce, not through their regions.
    Returns how many (tiling, tile) pairs were checked, so a test can insist on some.
    """
    rng = np.random.default_rng(seed)
    reference = op.forward(inputs, weights)
    checked = 0
    for degrees in itertools.islice(tilings(sig, skip=op.statistics_dims), max_tilings):
        for coords in itertools.product(*(range(d) for d in degrees)):
            region = tile_region(sig.output_shape, degrees, coords)
            in_regions = op.input_regions(sig, region)
            w_regions = op.weight_regions(sig, region)
            assert len(in_regions) == len(inputs) and len(w_regions) == len(weights)
            scrambled_in = [_scramble(a, r, rng) for a, r in zip(inputs, in_regions, strict=True)]
            scrambled_w = [_scramble(w, r, rng) for w, r in zip(weights, w_regions, strict=True)]
            outputs = op.forward(scrambled_in, scrambled_w)
            for out, ref, out_region in zip(
                outputs, reference, op.output_regions(sig, region), strict=True
            ):
                np.testing.assert_allclose(
                    out[region_slices(out_region)],
                    ref[region_slices(out_region)],
                    rtol=1e-12,
                    atol=1e-12,
                    err_msg=f"{op.kind}: tile {region} of degrees {degrees} reads outside its regions",
                )
            checked += 1
    return checked


def _scramble(array: np.ndarray, region, rng: np.random.Generator) -> np.ndarray:
    """A copy of `array` with every element outside `region` replaced by garbage."""
    if np.issubdtype(array.dtype, np.floating):
        out = rng.standard_normal(array.shape) * 100
    else:
        out = np.zeros_like(array)  # index 0 is valid for every embedding table
    out[region_slices(region)] = array[region_slices(region)]
    return out.astype(array.dtype)
