"""cffi build of the CPU op kernels (native/kernels.c) as flexflow._kernels; kernels.h is the one declaration."""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

SOURCES = (
    "kernels.c",
    "conv.c",
    "optimizers.c",
    "dense.c",
    "losses.c",
    "step.c",
    "lstm.c",
    "exchange.c",
    "attention.c",
    "activations.c",
    "layer_norm.c",
)
# -ffp-contract=off: float32 bits as numpy computes them (no fused multiply-adds);
# -fno-math-errno: sqrt as one (vectorizable) instruction, the same correctly rounded bits
# without setting errno (Adam's update over LeNet's weights 1.40 -> 0.43 ms)
# -Wno-psabi: batch norm's 8-double lanes pass between inlined helpers, whose ABI note
# (AVX-512 vectors by value) concerns no call that is made
COMPILE_ARGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-Wno-psabi")


def builder(module: str = "flexflow._kernels", defines: tuple[str, ...] = ()) -> FFI:
    """The cffi builder of the kernels as `module`; `defines` (e.g. FF_NO_CLONES, which
    tests/ops/test_clones.py builds with) go to the compiler as -D flags."""
    ffi = FFI()
    ffi.cdef((HERE / "kernels.h").read_text())
    ffi.set_source(
        module,
        '#include "kernels.h"\n',
        sources=[str(HERE / name) for name in SOURCES],
        include_dirs=[str(HERE)],
        extra_compile_args=[*COMPILE_ARGS, *(f"-D{name}" for name in defines)],
        libraries=["m"],
    )
    return ffi


ffibuilder = builder()

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
