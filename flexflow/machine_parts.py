"""The parts of a machine (paper §5's device topology D): its devices and directed links, each
validated when built against rules far outside any hardware.

`Machine` (flexflow/machine.py) joins them with switches into a topology; a full-duplex
connection is two `Link`s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from flexflow.errors import MachineError, shown

DEVICE_KINDS = ("cpu", "gpu")
LINK_KINDS = (
    "nvlink",  # GPU <-> GPU NVLink
    "nvswitch",  # GPU <-> NVSwitch fabric
    "pcie",  # a PCIe link (device <-> PCIe switch, host bridge or NIC)
    "host_bridge",  # PCIe switch <-> CPU root complex
    "qpi",  # socket <-> socket (QPI / UPI)
    "nic",  # inside a network adapter
    "infiniband",  # NIC <-> InfiniBand switch
    "ethernet",  # NIC <-> Ethernet switch
    "memory",  # CPU <-> CPU through shared memory
)


def _is_number(value: Any) -> bool:
    """A finite int or float (an int past float's range, 1 and 400 zeros, is not)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# Field rules: (test, what the field must be, normalize). One table serves Device and Link.
_INDEX = (
    lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
    "a non-negative integer",
    None,
)
_TEXT = (lambda v: isinstance(v, str) and v != "", "a non-empty string", None)


def _within(low: float, high: float, unit: str) -> tuple:
    """A rule for a number in [low, high]: bounds far outside any hardware, so every time the
    simulator derives stays finite (a bandwidth of 1e-300 B/s or a latency of 1e308 s made
    iteration times infinite and stopped searches)."""

    def test(v: Any) -> bool:
        return _is_number(v) and low <= v <= high

    return (test, f"a number at least {low:g} and at most {high:g} {unit}", float)


_FLOPS = _within(1e3, 1e21, "FLOP/s")
_BYTES_PER_S = _within(1.0, 1e18, "bytes/s")
_LATENCY = _within(0.0, 1e3, "seconds")
_WHOLE = (
    lambda v: _is_number(v) and v > 0 and float(v).is_integer(),
    "a positive whole number",
    int,
)


def _one_of(kinds: tuple[str, ...]) -> tuple:
    return (lambda v: v in kinds, f"one of {', '.join(kinds)}", None)


def _validate(value: Any, label: str, rules: dict[str, tuple]) -> None:
    """Check each field of a frozen value against its rule, normalize numbers, name all problems."""
    problems = []
    for key, (test, expected, _) in rules.items():
        if not test(getattr(value, key)):
            problems.append(f"{key} must be {expected}, got {shown(getattr(value, key))}")
    if problems:
        raise MachineError(f"{label}: {'; '.join(problems)}; fix its description.")
    for key, (_, _, normalize) in rules.items():
        if normalize is not None:
            object.__setattr__(value, key, normalize(getattr(value, key)))


@dataclass(frozen=True, slots=True)
class Device:
    """A compute device: one GPU, or one CPU core Legate runs tasks on."""

    id: int
    name: str  # "n0.gpu1"
    kind: str  # "gpu" or "cpu"
    model: str  # "Tesla P100-SXM2"
    node: int
    peak_flops: float  # FP32 FLOP/s
    memory_bandwidth_bytes_per_s: float
    memory_bytes: int

    def __post_init__(self) -> None:
        _validate(self, f"device {self.id!r} {self.name!r}", DEVICE_RULES)


DEVICE_RULES = {
    "id": _INDEX,
    "name": _TEXT,
    "kind": _one_of(DEVICE_KINDS),
    "model": _TEXT,
    "node": _INDEX,
    "peak_flops": _FLOPS,
    "memory_bandwidth_bytes_per_s": _BYTES_PER_S,
    "memory_bytes": _WHOLE,
}


@dataclass(frozen=True, slots=True)
class Link:
    """One direction of a physical connection; a full-duplex connection is two Links."""

    id: int
    name: str  # "n0.nvlink.gpu0->gpu1"
    kind: str  # one of LINK_KINDS
    src: str  # endpoint name: a device or a switch
    dst: str
    bandwidth_bytes_per_s: float
    latency_s: float

    def __post_init__(self) -> None:
        _validate(self, f"link {self.id!r} {self.name!r}", LINK_RULES)
        if self.src == self.dst:
            raise MachineError(
                f"link {self.id!r} {self.name!r}: src and dst are both {self.src!r}; "
                "a link joins two different endpoints; fix its description."
            )

    def transfer_s(self, size_bytes: float) -> float:
        """Time to move `size_bytes` over this link alone: latency plus size / bandwidth (A2)."""
        return self.latency_s + size_bytes / self.bandwidth_bytes_per_s


LINK_RULES = {
    "id": _INDEX,
    "name": _TEXT,
    "kind": _one_of(LINK_KINDS),
    "src": _TEXT,
    "dst": _TEXT,
    "bandwidth_bytes_per_s": _BYTES_PER_S,
    "latency_s": _LATENCY,
}
