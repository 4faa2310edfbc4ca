"""The conventional names of a tensor's dimensions by rank (NCHW images, (batch, time, features) sequences) and the SOAP dims they make."""

from __future__ import annotations

from .base import Dim, DimKind

LAYOUT_NAMES: dict[int, tuple[str, ...]] = {
    1: ("sample",),
    2: ("sample", "channel"),
    3: ("sample", "length", "channel"),
    4: ("sample", "channel", "height", "width"),
}
"""Conventional dimension names by rank: NCHW images, (batch, time, features) sequences."""


def dim_names(rank: int) -> tuple[str, ...]:
    return LAYOUT_NAMES.get(rank, ("sample",) + tuple(f"attribute{i}" for i in range(1, rank)))


def features_last_names(rank: int) -> tuple[str, ...]:
    """Dimension names of a tensor whose features are its last dimension (a dense layer's
    input and output): NHWC images, (batch, time, features) sequences. Each name once:
    strategy files key an op's degrees by them."""
    return ("sample", "height", "width", "channel") if rank == 4 else dim_names(rank)


def sample_dims(rank: int, rest: DimKind | None) -> tuple[Dim, ...]:
    """Dims of a rank-`rank` output whose first dim is the sample and every other dim has kind `rest`."""
    names = dim_names(rank)
    return (Dim("sample", DimKind.SAMPLE),) + tuple(Dim(n, rest) for n in names[1:])
