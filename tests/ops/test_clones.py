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
        lib_.ff_adam_update_f32(f(module, w), parts, 2, n, f(module, m1), f(module, m2), 1e-3,
                                0.9, 0.999, 1e-8, 1e-4, 0.1, 0.001)  # fmt: skip
        out += [w, m1, m2]
        w, v = weight.copy(), np.full(n, 0.3, np.float32)
        lib_.ff_sgd_update_f32(f(module, w), parts, 2, n, f(module, v), 0.01, 0.9, 1e-4, True)
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
