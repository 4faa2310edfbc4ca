"""The element-wise functions' and binary ops' CUDA source compiled as host C++ (g++): its
formulas against the numpy rules (`flexflow.ops.unary_functions`, `element_binary`), value by
value, called with the codes `flexflow.gpu.prims` launches them with. The emulator runs the numpy
rules themselves, so it checks the launches but not these lines of CUDA; this runs them."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from flexflow.gpu.prims import BINARY_CODES, FUNCTION_CODES
from flexflow.gpu.sources import COMMON, ELEMENTWISE
from flexflow.ops.element_binary import BINARY_RULES, BinaryOp
from flexflow.ops.unary_functions import UNARY_FUNCTIONS, UnaryFunction

from .host_cpp import compile_host

_HOST = """#include <cmath>
using std::isnan;
#define __device__
#define __global__
#define __forceinline__ inline
#define GRID_STRIDE_LOOP(i, n) for (long long i = 0; i < (n); ++i)
"""
"""What makes the device code host C++: a grid-stride loop over every element is a plain loop."""


class _Dims(ctypes.Structure):
    _fields_ = [("v", ctypes.c_longlong * 8)]


def _source() -> str:
    """Dims and strided_offset from COMMON, then ELEMENTWISE's functions and binary kernels."""
    dims = COMMON[COMMON.index("#define MAX_RANK") : COMMON.index("#define GRID_STRIDE_LOOP")]
    offset = COMMON.index("// Offset (in elements)")
    offset_end = COMMON.index("\n}\n", offset) + 3
    kernels = ELEMENTWISE[ELEMENTWISE.index("#define FN_EXP") : ELEMENTWISE.index("// splitmix64")]
    return _HOST + dims + COMMON[offset:offset_end] + kernels


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    return compile_host(_source(), tmp_path_factory.mktemp("elementwise"), "elementwise")


def _pointer(values: np.ndarray) -> ctypes.c_void_p:
    return ctypes.c_void_p(values.ctypes.data)


_INPUTS = np.concatenate(
    [np.random.default_rng(3).standard_normal(40), [0.0, -0.0, 2.0, -2.0, 1e-3, np.nan]]
).astype(np.float32)
_SCALARS = {
    UnaryFunction.POW: (0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, 2.5, -0.5),
    UnaryFunction.SCALAR_MULTIPLY: (-2.5, 0.0),
    UnaryFunction.SCALAR_ADD: (1.5,),
    UnaryFunction.SCALAR_SUB: (1.5,),
    UnaryFunction.SCALAR_TRUE_DIVIDE: (3.0, -0.25),
}


def _assert_close(host: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(host, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize(
    "function, scalar",
    [(f, s) for f in UnaryFunction for s in _SCALARS.get(f, (0.0,))],
    ids=lambda value: value.value if isinstance(value, UnaryFunction) else str(value),
)
def test_function_forward_and_backward_follow_the_numpy_rules(kernels, function, scalar):
    x, rule, code = _INPUTS, UNARY_FUNCTIONS[function], FUNCTION_CODES[function]
    n = ctypes.c_longlong(x.size)
    y, dx = np.empty_like(x), np.empty_like(x)
    dy = np.linspace(-1.0, 2.0, x.size, dtype=np.float32)
    kernels.function_forward(_pointer(y), _pointer(x), n, ctypes.c_longlong(code),
                             ctypes.c_double(scalar))  # fmt: skip
    expected = rule.forward(x, scalar)
    _assert_close(y, expected)
    kernels.function_backward(_pointer(dx), _pointer(x), _pointer(expected), _pointer(dy), n,
                              ctypes.c_longlong(code), ctypes.c_double(scalar))  # fmt: skip
    _assert_close(dx, rule.grad(x, expected, dy, scalar))


_A = np.array([1, 2, np.nan, 1, np.nan, 3, np.inf, -1, 0], np.float32)
_B = np.array([1, 1, 1, np.nan, np.nan, 4, np.inf, -1, 2], np.float32)


@pytest.mark.parametrize("op", list(BinaryOp), ids=lambda op: op.value)
def test_binary_ops_and_their_gradients_follow_the_numpy_rules(kernels, op):
    """Ties, NaNs and infinities included: the output, and where max and min send dz."""
    rng = np.random.default_rng(4)
    a = np.concatenate([_A, rng.standard_normal(20).astype(np.float32)])
    b = np.concatenate([_B, rng.standard_normal(20).astype(np.float32)])
    n, code = ctypes.c_longlong(a.size), ctypes.c_longlong(BINARY_CODES[op.value])
    shape, strides = _Dims(), _Dims()
    shape.v[0], strides.v[0] = a.size, 1
    out = np.empty_like(a)
    kernels.binary(_pointer(out), _pointer(a), _pointer(b), n, ctypes.c_longlong(1), shape,
                   strides, strides, code)  # fmt: skip
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(out, BINARY_RULES[op].forward(a, b))
        if op not in (BinaryOp.DIVIDE, BinaryOp.MAX, BinaryOp.MIN):
            return  # their gradients are copies and products (prims.binary, tested above)
        dz = np.arange(1.0, a.size + 1, dtype=np.float32)
        da, db = np.empty_like(a), np.empty_like(a)
        kernels.binary_backward(_pointer(da), _pointer(db), _pointer(a), _pointer(b), _pointer(dz),
                                n, code)  # fmt: skip
        expected_a, expected_b = BINARY_RULES[op].grads(a, b, dz)
    np.testing.assert_array_equal(da, expected_a)
    np.testing.assert_array_equal(db, expected_b)
