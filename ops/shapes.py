"""Shape arithmetic shared by the windowed ops (convolution, pooling) and the tiling of outputs."""

from __future__ import annotations

from .base import Region, Shape


def window_output_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a sliding window: floor((size + 2*padding - kernel) / stride) + 1."""
    return (size + 2 * padding - kernel) // stride + 1


def window_input_range(
    out_start: int, out_stop: int, kernel: int, stride: int, padding: int, size: int
) -> tuple[int, int]:
    """The input rows that output rows [out_start, out_stop) read, halo included, clipped to the input."""
    if out_stop <= out_start:
        return (0, 0)
    first = out_start * stride - padding
    last = (out_stop - 1) * stride - padding + kernel  # exclusive
    return (max(first, 0), min(last, size))


def tile_region(shape: Shape, degrees: tuple[int, ...], coords: tuple[int, ...]) -> Region:
    """Tile `coords` of `shape` split into `degrees` equal parts per dim (each degree divides its dim)."""
    region = []
    for size, degree, coord in zip(shape, degrees, coords, strict=True):
        step = size // degree
        region.append((coord * step, (coord + 1) * step))
    return tuple(region)
