"""Canonical task keys: what a task is, packed in one unsigned 64-bit integer that orders it.

A key is the device-task flag, 3 kind bits, then four fields a, b, c, d of 18, 14, 14 and 14
bits (op or parameter id; task, input or group index; consumer task, ring step or device;
producer task). It does not depend on the order a task graph was built in, so ties between
tasks ready at the same time on one device break the same way in a graph updated by deltas
and in one built afresh; and a task's name is read back from it instead of being stored.
"""

from __future__ import annotations

FWD_KEY, BWD_KEY, XFER_KEY, GRAD_XFER_KEY, GATHER_KEY, RING_KEY, REDUCED_KEY, UPDATE_KEY = range(8)
KIND_SHIFT, A_SHIFT, B_SHIFT, C_SHIFT = 60, 42, 28, 14  # field d: the low 14 bits
A_LIMIT, FIELD_LIMIT = 1 << 18, 1 << 14  # field a's limit, the others'
DEVICE_TASK = 1 << 63  # above every key: tasks holding a device or link come after barriers


def task_key(kind: int, a: int = 0, b: int = 0, c: int = 0, d: int = 0) -> int:
    """Pack (kind, a, b, c, d) into an int whose order is the tuple's order (fields >= 0)."""
    if not (
        0 <= a < A_LIMIT and 0 <= b < FIELD_LIMIT and 0 <= c < FIELD_LIMIT and 0 <= d < FIELD_LIMIT
    ):
        raise AssertionError(f"task key fields {(a, b, c, d)} out of range for 18, 14, 14, 14 bits")
    return kind << KIND_SHIFT | a << A_SHIFT | b << B_SHIFT | c << C_SHIFT | d


def key_kind(key: int) -> int:
    return (key >> KIND_SHIFT) & 7


def key_fields(key: int) -> tuple[int, int, int, int, int]:
    """(kind, a, b, c, d) of a key: `task_key`'s inverse (the device-task flag dropped)."""
    field = FIELD_LIMIT - 1
    return (
        key_kind(key),
        key >> A_SHIFT & (A_LIMIT - 1),
        key >> B_SHIFT & field,
        key >> C_SHIFT & field,
        key & field,
    )
