"""Keep freed heap memory in the process: op tiles allocate the same large buffers every iteration.

glibc serves allocations above its mmap threshold (128 KiB, growing only as such blocks are
freed) with fresh mmap()s and gives freed heap tops back to the kernel above its trim
threshold, so every iteration's im2col columns and activations page-fault their memory in
again; a page fault per 4 KiB made LeNet's conv2 backward tile 2x slower (9.0 -> 4.5 ms, the
same arrays, measured on this repository's 2-core host). Raising both thresholds makes freed
blocks serve the next iteration's allocations, as a caching allocator would. The cost is
memory the process keeps after a peak, never more than that peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20
"""glibc's largest mmap threshold on 64-bit hosts (mallopt(3)); larger blocks are still mapped."""
TRIM_THRESHOLD_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Set glibc's thresholds for this process; False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl, macOS: their allocators behave otherwise
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
