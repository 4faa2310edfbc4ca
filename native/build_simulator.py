"""cffi build of the simulator's C parts (native/simulator.c, overlaps.c, blocks.c) as flexflow._simulator."""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

ffibuilder = FFI()
ffibuilder.cdef((HERE / "simulator.h").read_text())  # one declaration for Python and C
ffibuilder.set_source(
    "flexflow._simulator",
    '#include <stdint.h>\n#include "simulator.h"\n',
    sources=[str(HERE / n) for n in ("simulator.c", "overlaps.c", "blocks.c")],
    include_dirs=[str(HERE)],
    # The times must equal the Python reference's bit for bit: no contraction into fused
    # multiply-adds, no fast-math reassociation.
    extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
