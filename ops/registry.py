"""The one table of operator kinds: each `ops/<name>.py` registers its class here under its `kind`."""

from __future__ import annotations

from typing import TypeVar

from .base import Op

OP_KINDS: dict[str, type[Op]] = {}

T = TypeVar("T", bound=type[Op])


def register(cls: T) -> T:
    """Class decorator adding an op kind to `OP_KINDS`; a kind may be registered once."""
    if cls.kind in OP_KINDS:
        raise AssertionError(f"op kind {cls.kind!r} registered twice")
    OP_KINDS[cls.kind] = cls
    return cls
