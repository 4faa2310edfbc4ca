"""The kernels built for several instruction sets (native/clones.h, FF_CLONES) give the bits of
their x86-64 baseline build: the installed library runs the widest build this CPU has, a copy
built here with FF_NO_CLONES runs the baseline alone, and both run the same inputs."""

import importlib.util
import platform
from pathlib import Path

import numpy as np
import pytest

from flexflow._kernels import ffi, lib

NATIVE = Path(__file__).resolve().parents[2] / "native"

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the clones are x86-64 builds"
)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The kernels built with FF_NO_CLONES, as a module of their own."""
    spec = importlib.util.spec_from_file_location("build_kernels", NATIVE / "build_kernels.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    where = tmp_path_factory.mktemp("baseline")
    builder = build.builder("ff_baseline_kernels", ("FF_NO_CLONES",))
    library = builder.compile(tmpdir=str(where))
    spec = importlib.util.spec_from_file_location("ff_baseline_kernels", library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _f(module, array):
    kind = "double *" if array.dtype == np.float64 else "float *"
    return module.ffi.cast(kind, module.ffi.from_buffer(array))


def _both(baseline, call):
    """call(module, pointer) with each library; the arrays each wrote."""
    ours = call(type("M", (), {"ffi": ffi, "lib": lib}), _f)
    theirs = call(baseline, _f)
    return ours, theirs


@pytest.mark.parametrize("relu", [0, 1])
@pytest.mark.parametrize("shape", [(4, 5, 7, 9), (3, 16, 8, 8), (2, 3, 1, 1)])
def test_batch_norm_kernels_give_the_baseline_bits(baseline, shape, relu):
    rng = np.random.default_rng(sum(shape) + relu)
    n, c, h, w = shape
    hw = h * w
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    gamma, beta = (
        rng.standard_normal(c).astype(np.float32),
        rng.standard_normal(c).astype(np.float32),
    )
    count = float(n * hw)

    def run(module, f):
        lib_ = module.lib
        stats = np.zeros(2 * c)
        lib_.ff_bn_stats_f32(f(module, x), f(module, stats), n, c, hw)
        y = np.empty_like(x)
        lib_.ff_bn_forward_f32(f(module, x), f(module, y), f(module, stats), f(module, gamma),
                               f(module, beta), n, c, hw, count, 1e-5, relu)  # fmt: skip
        sums = np.zeros(2 * c)
        lib_.ff_bn_stats_backward_f32(f(module, x), f(module, y), f(module, dy), f(module, stats),
                                      f(module, sums), n, c, hw, count, 1e-5, relu)  # fmt: skip
        dx, dgamma, dbeta = np.empty_like(x), np.empty(c, np.float32), np.empty(c, np.float32)
        lib_.ff_bn_backward_f32(f(module, x), f(module, y), f(module, dy), f(module, gamma),
                                f(module, stats), f(module, sums), module.ffi.NULL, f(module, dx),
                                f(module, dgamma), f(module, dbeta), n, c, hw, count, 1e-5,
                                relu)  # fmt: skip
        return stats, y, sums, dx, dgamma, dbeta

    ours, theirs = _both(baseline, run)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_updates_pools_and_layer_norm_give_the_baseline_bits(baseline):
    rng = np.random.default_rng(1)
    n = 1000
    weight, grads = rng.standard_normal(n).astype(np.float32), rng.standard_normal((2, n))
    grads = grads.astype(np.float32)
    x = rng.standard_normal((2, 3, 9, 10)).astype(np.float32)
    rows, width = 37, 24
    z = rng.standard_normal((rows, width)).astype(np.float32)
    g = rng.standard_normal(width).astype(np.float32)
    dz = rng.standard_normal((rows, width)).astype(np.float32)

    def run(module, f):
        lib_, out = module.lib, []
        parts = module.ffi.new("const float *[]", [f(module, grads[0]), f(module, grads[1])])
        w, m1, m2 = weight.copy(), np.full(n, 0.1, np.float32), np.full(n, 0.2, np.float32)
        lib_.ff_adam_update_f32(f(module, w), parts, 2, 0, n, f(module, m1), f(module, m2),
                                1e-3, 0.9, 0.999, 1e-8, 1e-4, 0.1, 0.001, 2e-3)  # fmt: skip
        out += [w, m1, m2]
        w, v = weight.copy(), np.full(n, 0.3, np.float32)
        lib_.ff_sgd_update_f32(f(module, w), parts, 2, 0, n, f(module, v), 0.01, 0.9, 1e-4, True,
                               2e-3)  # fmt: skip
        out += [w, v]
        for is_max in (0, 1):
            y = np.empty((2, 3, 5, 5), np.float32)
            lib_.ff_pool2d_forward_f32(f(module, x), f(module, y), 2, 3, 9, 10, 5, 5, 3, 3, 2, 2,
                                       1, 1, is_max)  # fmt: skip
            dx = np.empty_like(x)
            lib_.ff_pool2d_backward_f32(f(module, x), f(module, y), f(module, dx), 2, 3, 9, 10, 5,
                                        5, 3, 3, 2, 2, 1, 1, is_max)  # fmt: skip
            out += [y, dx]
        y, x_hat, rstd = (np.empty_like(z), np.empty_like(z), np.empty(rows, np.float32))
        lib_.ff_layer_norm_forward_f32(f(module, z), f(module, g), f(module, g), f(module, y),
                                       f(module, x_hat), f(module, rstd), rows, width, 1e-5)  # fmt: skip
        dx, dgamma, dbeta = np.empty_like(z), np.empty_like(g), np.empty_like(g)
        scratch = np.empty(4 * width)
        lib_.ff_layer_norm_backward_f32(f(module, x_hat), f(module, rstd), f(module, g),
                                        f(module, dz), f(module, dx), f(module, dgamma),
                                        f(module, dbeta), f(module, scratch), rows, width)  # fmt: skip
        return out + [y, x_hat, rstd, dx, dgamma, dbeta]

    ours, theirs = _both(baseline, run)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_activations_give_the_baseline_bits(baseline):
    """Our float32 tanh and exp (native/fastmath.h) inside every activation and its gradient,
    on values across their branches (the polynomial below 0.625, the exponential above, +-10)."""
    rng = np.random.default_rng(2)
    z = np.concatenate([rng.standard_normal(5000) * 4, [0.0, -0.0, 0.625, -0.625, 12.0, -30.0]])
    z = z.astype(np.float32)
    dy = rng.standard_normal(z.size).astype(np.float32)
    codes = [lib.FF_ACT_RELU, lib.FF_ACT_GELU, lib.FF_ACT_TANH, lib.FF_ACT_SIGMOID, lib.FF_ACT_ELU]

    def run(module, f):
        lib_, out = module.lib, []
        for act in codes:
            y, dz = np.empty_like(z), np.empty_like(z)
            lib_.ff_activate_f32(act, f(module, z), f(module, y), z.size)
            lib_.ff_activation_grad_f32(act, f(module, z), f(module, y), f(module, dy),
                                        f(module, dz), z.size)  # fmt: skip
            out += [y, dz]
        y, t, dz = np.empty_like(z), np.empty_like(z), np.empty_like(z)
        lib_.ff_gelu_kept_f32(f(module, z), f(module, y), f(module, t), z.size)
        lib_.ff_gelu_grad_kept_f32(f(module, z), f(module, t), f(module, dy), f(module, dz), z.size)
        return out + [y, t, dz]

    ours, theirs = _both(baseline, run)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_lstm_steps_give_the_baseline_bits(baseline):
    """An LSTM step and its backward (native/lstm.c) through MKL's sgemm, which both builds
    call: the gates' element-wise work is what differs between the builds."""
    from flexflow.ops import blas

    if blas.sgemm_address() is None:
        pytest.skip("MKL is not installed")
    rng = np.random.default_rng(3)
    n, e, hid = 5, 7, 6
    x, h0, c0 = (rng.standard_normal(s).astype(np.float32) for s in ((n, e), (n, hid), (n, hid)))
    w_ih = rng.standard_normal((4 * hid, e)).astype(np.float32)
    w_hh = rng.standard_normal((4 * hid, hid)).astype(np.float32)
    bias = rng.standard_normal(4 * hid).astype(np.float32)
    dh, dc = rng.standard_normal((n, hid)).astype(np.float32), np.zeros((n, hid), np.float32)

    def run(module, f):
        lib_, ffi_ = module.lib, module.ffi
        gemm = ffi_.cast("ff_sgemm_fn", blas.sgemm_address())
        z, h, c = np.empty((n, 4 * hid), np.float32), np.empty((n, hid), np.float32), None
        c = np.empty((n, hid), np.float32)
        args = (f(module, x), f(module, h0), f(module, c0), f(module, w_ih), f(module, w_hh),
                f(module, bias))  # fmt: skip
        lib_.ff_lstm_forward_f32(gemm, *args, f(module, z), f(module, h), f(module, c), n, e,
                                 hid, hid, e)  # fmt: skip
        dz, dx = np.empty_like(z), np.empty_like(x)
        dh0, dc0 = np.empty_like(h0), np.empty_like(c0)
        grads = [np.empty_like(w_ih), np.empty_like(w_hh), np.empty_like(bias)]
        lib_.ff_lstm_backward_f32(gemm, *args, f(module, c), f(module, dh), f(module, dc),
                                  f(module, z), f(module, dz), f(module, dx), f(module, dh0),
                                  f(module, dc0), *(f(module, g) for g in grads), n, e, hid, hid,
                                  1, e)  # fmt: skip
        return [z, h, c, dz, dx, dh0, dc0, *grads]

    ours, theirs = _both(baseline, run)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
