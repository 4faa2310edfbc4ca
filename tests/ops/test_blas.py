"""ops/blas.py: MKL's products equal numpy's for every layout the kernels pass, land in the
output given, repeat their bits whatever the operands' alignment, and MKL is what the install
put there."""

from __future__ import annotations

import platform

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow.ops import blas

needs_mkl = pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the mkl wheel is for x86-64")
def test_the_install_brings_mkl_on_x86_64():
    assert blas.provider().startswith("mkl "), blas.provider()
    assert blas.sgemm_address()


def _layout(array: np.ndarray, layout: str) -> np.ndarray:
    """The same values as a row-major array, a transposed view, or rows of a wider array."""
    if layout == "transposed":
        return np.ascontiguousarray(array.T).T
    if layout == "rows":
        wide = np.zeros((array.shape[0], array.shape[1] + 3), array.dtype)
        wide[:, 1 : 1 + array.shape[1]] = array
        return wide[:, 1 : 1 + array.shape[1]]
    return array


LAYOUTS = st.sampled_from(["row-major", "transposed", "rows"])


@needs_mkl
@settings(max_examples=60, deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 40),
    k=st.integers(1, 40),
    left=LAYOUTS,
    right=LAYOUTS,
    dtype=st.sampled_from([np.float32, np.float64]),
    into=st.booleans(),
)
def test_products_equal_numpys_for_every_layout(m, n, k, left, right, dtype, into):
    rng = np.random.default_rng(m * 10_000 + n * 100 + k)
    a = _layout(rng.standard_normal((m, k)).astype(dtype), left)
    b = _layout(rng.standard_normal((k, n)).astype(dtype), right)
    out = np.full((m, n), np.nan, dtype) if into else None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blas, "SMALL_PRODUCT", 0)  # every product through MKL
        got = blas.matmul(a, b, out)
    if into:
        assert got is out
    assert got.dtype == dtype and got.shape == (m, n)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=tolerance, atol=tolerance * k)


@needs_mkl
def test_the_same_bits_whatever_the_alignment():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 300)).astype(np.float32)
    b = rng.standard_normal((300, 200)).astype(np.float32)
    want = blas.matmul(a, b)

    def shifted(array: np.ndarray, floats: int) -> np.ndarray:
        buffer = np.empty(array.size + 16, np.float32)
        view = buffer[floats : floats + array.size].reshape(array.shape)
        view[...] = array
        return view

    for offset in range(1, 16, 3):
        got = blas.matmul(shifted(a, offset), shifted(b, 15 - offset))
        np.testing.assert_array_equal(got, want)


@needs_mkl
def test_an_output_that_overlaps_an_operand_gets_numpys_answer(monkeypatch):
    monkeypatch.setattr(blas, "SMALL_PRODUCT", 0)
    rng = np.random.default_rng(2)
    for size in (8, 700):
        a = rng.standard_normal((size, size)).astype(np.float32)
        b = rng.standard_normal((size, size)).astype(np.float32)
        want = a @ b
        got = blas.matmul(a, b, out=a)  # numpy buffers the operand it overwrites
        assert got is a
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_a_read_only_output_is_refused_as_numpy_refuses_it():
    a = np.ones((200, 200), np.float32)
    out = np.empty((200, 200), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        blas.matmul(a, a, out)


@pytest.mark.parametrize(
    "a, b",
    [
        (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)),  # small: numpy's
        (np.ones((200, 200), np.float32), np.ones((200, 200), np.float64)),  # mixed types
        (np.ones((200, 200), np.int64), np.ones((200, 200), np.int64)),  # integers
    ],
)
def test_what_mkl_does_not_take_is_numpys_product(a, b):
    got = blas.matmul(a, b)
    assert got.dtype == np.result_type(a, b)
    np.testing.assert_array_equal(got, a @ b)


@pytest.mark.parametrize("groups", [1, 3])
def test_grouped_products_stack_each_groups_product(groups, monkeypatch):
    monkeypatch.setattr(blas, "SMALL_PRODUCT", 0)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((groups, 5, 7)).astype(np.float32)
    b = rng.standard_normal((groups, 7, 4)).astype(np.float32).transpose(0, 2, 1)
    b = np.ascontiguousarray(b).transpose(0, 2, 1)  # each group's matrix a transposed view
    got = blas.grouped_matmul(a, b)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def _fresh(monkeypatch):
    """ops.blas as if nothing had loaded a library yet (restored after the test)."""
    monkeypatch.setattr(blas, "_LOADED", [])


def test_without_the_mkl_wheel_numpy_runs_the_products(monkeypatch):
    _fresh(monkeypatch)
    monkeypatch.setattr(blas, "mkl_library", lambda: None)
    assert blas.provider() == "numpy" and blas.sgemm_address() is None
    a = np.ones((300, 300), np.float32)
    np.testing.assert_array_equal(blas.matmul(a, a), a @ a)


def test_mkl_that_refuses_its_reproducible_mode_is_a_clear_error(monkeypatch):
    import cffi

    from flexflow.errors import RuntimeSetupError

    class Refusing:
        cblas_sgemm = None

        @staticmethod
        def MKL_Set_Threading_Layer(code):  # noqa: N802 (MKL's name)
            return 1

        @staticmethod
        def MKL_CBWR_Set(setting):  # noqa: N802
            return -8

    _fresh(monkeypatch)
    monkeypatch.setattr(cffi.FFI, "dlopen", lambda self, path: Refusing())
    with pytest.raises(RuntimeSetupError, match="another library in this process called MKL"):
        blas.provider()
