"""join_parts' CUDA source compiled as host C++ (g++) and driven by tile_shape's own launches:
the kernel's index math against numpy. The emulator runs a numpy re-implementation of each
kernel, so it checks the launches' arguments but not the CUDA source itself; this runs that
source (its template body, with the grid-stride loop as a plain loop)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from flexflow.gpu import nvrtc, tile_shape
from flexflow.gpu.sources import LAYOUT

from .emulator import HostGpu
from .host_cpp import compile_host

TYPES = {"f32": "float", "f64": "double", "i32": "int", "i64": "long long"}


@pytest.fixture(scope="module")
def host_kernel(tmp_path_factory):
    body = LAYOUT[LAYOUT.index("#define MAX_PARTS") : LAYOUT.index("#define LAYOUT_KERNELS")]
    wrappers = "".join(
        f'extern "C" void join_parts_{suffix}({t} *w, const Parts *p, const Parts *e, '
        "long long c, long long o, long long in, long long wl, long long st, long long j) "
        f"{{ join_parts<{t}>(w, *p, *e, c, o, in, wl, st, j); }}\n"
        for suffix, t in TYPES.items()
    )
    source = (
        "#define __device__\n#define GRID_STRIDE_LOOP(i, n) for (long long i = 0; i < (n); ++i)\n"
        + body
        + wrappers
    )
    return compile_host(source, tmp_path_factory.mktemp("join_parts"), "join")


@pytest.fixture
def host(monkeypatch, host_kernel) -> HostGpu:
    parts = ctypes.c_ulonglong * nvrtc.MAX_PARTS

    def launch(gpu, source, name, grid, args, block=nvrtc.BLOCK):
        whole, pointers, ends, *scalars = args
        getattr(host_kernel, name)(
            ctypes.c_void_p(whole[0]),
            ctypes.byref(parts(*pointers)),
            ctypes.byref(parts(*ends)),
            *(ctypes.c_longlong(v[0]) for v in scalars),
        )

    monkeypatch.setattr(tile_shape, "launch", launch)
    return HostGpu()


CASES = [  # (dtype, part count, axis): groups past 64 parts, every element type
    (dtype, count, axis)
    for count, axis in ((1, 0), (3, 1), (64, 2), (65, 1), (130, 0), (70, 2))
    for dtype in ("float32", "int64")
] + [("float64", 5, 1), ("int32", 66, 1)]


@pytest.mark.parametrize(("dtype", "count", "axis"), CASES)
def test_concat_and_its_cut_move_every_element_where_numpy_does(host, dtype, count, axis):
    rng = np.random.default_rng(count * 3 + axis)
    lengths = rng.integers(0, 4, count)  # zero-length parts too
    lengths[0] = max(lengths[0], 1)
    base = [2, 3, 4]
    parts = [
        rng.integers(-99, 99, base[:axis] + [int(n)] + base[axis + 1 :]).astype(dtype)
        for n in lengths
    ]
    want = np.concatenate(parts, axis=axis)
    joined = tile_shape._join(host, [host.to_device(p) for p in parts], axis)
    np.testing.assert_array_equal(host.to_host(joined), want)
    cut = tile_shape._cut(host, host.to_device(want), [int(n) for n in lengths], axis)
    for got, part in zip(cut, parts, strict=True):
        np.testing.assert_array_equal(host.to_host(got), part)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_stack_and_its_gradient_move_every_element_where_numpy_does(host, axis):
    rng = np.random.default_rng(axis)
    xs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(67)]
    op = type("Stack", (), {"axis": axis})()
    (out,) = tile_shape.stack_forward(host, op, None, None, [host.to_device(x) for x in xs], ())
    want = np.stack(xs, axis=axis)
    np.testing.assert_array_equal(host.to_host(out), want)
    inputs = [host.to_device(x) for x in xs]
    grads, _ = tile_shape.stack_backward(
        host, op, None, None, inputs, (), None, (host.to_device(want),)
    )
    for got, x in zip(grads, xs, strict=True):
        np.testing.assert_array_equal(host.to_host(got), x)
