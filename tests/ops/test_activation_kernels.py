"""The C activations (native/activations.c) against flexflow.ops.activations' numpy formulas:
our own tanh within an ulp of the correctly rounded value (special values included), and every
activation's value and gradient within float32 rounding of numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow._kernels import ffi, lib
from flexflow.ops.activations import ACTIVATIONS, ActiMode
from flexflow.ops.native_gemm import ACTIVATION_CODES


def _floats(array: np.ndarray):
    return ffi.from_buffer("float[]", array)


def _activate(mode: ActiMode, x: np.ndarray) -> np.ndarray:
    y = np.empty_like(x)
    lib.ff_activate_f32(ACTIVATION_CODES[mode], _floats(x), _floats(y), x.size)
    return y


def test_tanh_is_within_an_ulp_of_the_correctly_rounded_value():
    grid = np.linspace(-12, 12, 400_001)
    tiny = np.geomspace(1e-38, 1.0, 20_001)
    x = np.concatenate([grid, tiny, -tiny, [0.0, 5e-45, 9.9, 10.0, 10.1, 88.0, 1e30]])
    x = x.astype(np.float32)
    got = _activate(ActiMode.AC_MODE_TANH, x)
    exact = np.tanh(x.astype(np.float64)).astype(np.float32)  # correctly rounded
    ulps = np.abs(got.view(np.int32).astype(np.int64) - exact.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1
    assert np.array_equal(np.signbit(got), np.signbit(x))  # -0 stays -0, odd everywhere


def test_tanh_of_special_values():
    x = np.array([np.inf, -np.inf, np.nan, -0.0], np.float32)
    got = _activate(ActiMode.AC_MODE_TANH, x)
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2])
    assert got[3] == 0.0 and np.signbit(got[3])


@pytest.mark.parametrize("mode", list(ActiMode))
def test_every_activation_and_its_gradient_match_numpy(mode):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(10_000) * 4, [0.0, -0.0, 1e-6, -1e-6]])
    x = x.astype(np.float32)
    dy = rng.standard_normal(x.size).astype(np.float32)
    reference = ACTIVATIONS[mode]
    want = reference.forward(x)
    y = _activate(mode, x)
    # an ulp of tanh (GELU: 1 + tanh near 0 for large negative x) times |x|, beyond rounding
    assert np.all(np.abs(y - want) <= 2e-6 * np.abs(want) + 1.2e-7 * np.abs(x) + 1e-30)
    dz = np.empty_like(x)
    pre = _floats(x) if reference.grad_needs_input else ffi.NULL
    code = ACTIVATION_CODES[mode]
    lib.ff_activation_grad_f32(code, pre, _floats(y), _floats(dy), _floats(dz), x.size)
    # GELU's slope: 1 - tanh^2 near 0, times x^2
    bound = 2e-6 * np.abs(reference.grad(x, want, dy)) + 2.4e-7 * (1 + x * x) * np.abs(dy)
    assert np.all(np.abs(dz - reference.grad(x, want, dy)) <= bound)


def test_gelu_keeping_its_tanh_gives_the_same_bits():
    """A dense layer's GELU keeps its inner tanh for the backward (ff_gelu_kept_f32): the same
    values and gradients as computing it again."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(5_000) * 4).astype(np.float32)
    dy = rng.standard_normal(x.size).astype(np.float32)
    y, t, dz, want_dz = (np.empty_like(x) for _ in range(4))
    lib.ff_gelu_kept_f32(_floats(x), _floats(y), _floats(t), x.size)
    np.testing.assert_array_equal(y, _activate(ActiMode.AC_MODE_GELU, x))
    lib.ff_gelu_grad_kept_f32(_floats(x), _floats(t), _floats(dy), _floats(dz), x.size)
    code = ACTIVATION_CODES[ActiMode.AC_MODE_GELU]
    lib.ff_activation_grad_f32(code, _floats(x), _floats(y), _floats(dy), _floats(want_dz), x.size)
    np.testing.assert_array_equal(dz, want_dz)
