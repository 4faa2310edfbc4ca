"""cffi build of the CUDA driver stand-in (native/cuda_stub.c), a shared library whose SONAME is libcuda.so.1."""

from __future__ import annotations

from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent

ffibuilder = FFI()
# Python never calls into the stand-in; it is only loaded so that the dynamic loader can satisfy
# Legate's `NEEDED libcuda.so.1`. The declaration keeps one symbol visible to cffi.
ffibuilder.cdef("int cuInit(unsigned int flags);")
ffibuilder.set_source(
    "flexflow._cuda_stub",
    (HERE / "cuda_stub.c").read_text(),
    extra_link_args=["-Wl,-soname,libcuda.so.1"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
