"""Every GPU tile, optimizer and loss on the host emulation of the GPU, against the numpy references.

See `emulator.py`: kernel launches are checked against the C signatures NVRTC compiles and run
in numpy, cuBLAS and cuDNN are emulated from their documented semantics. What this checks is
the host side (arguments, shapes, strides, transposes, halo padding); the CUDA arithmetic is
checked on a GPU by `test_gpu_kernels.py`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from flexflow.errors import ShapeError
from flexflow.gpu import (
    check,
    libraries,
    prims,
    tile_elementwise,
    tile_linear,
    tile_norm,
    tile_shape,
    tiles,
    training,
)
from flexflow.gpu.blas import gemm
from flexflow.gpu.cases import CASES
from flexflow.ops import ActiMode, DType, TensorSpec
from flexflow.ops.base import region_slices
from flexflow.ops.element_binary import BinaryOp
from flexflow.ops.gather import Gather
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.shapes import tile_region
from flexflow.ops.unary_functions import UnaryFunction
from tests.ops.pool_loops import loop_pool2d, loop_pool2d_grad

from .emulator import KERNELS, LAUNCHED, HostCublas, HostCudnn, HostGpu, make_launch

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def host(monkeypatch) -> HostGpu:
    gpu = HostGpu()
    launch = make_launch(KERNELS)
    for module in (prims, tile_elementwise, tile_linear, tile_norm, tile_shape, training):
        monkeypatch.setattr(module, "launch", launch)
    monkeypatch.setitem(libraries._OPENED, "cublas", HostCublas(gpu))
    monkeypatch.setitem(libraries._OPENED, "cudnn", HostCudnn(gpu))
    return gpu


def _failures(results):
    return [
        f"{r.check}: {r.what}: error {r.max_rel_error:.2e} {r.note}" for r in results if not r.ok
    ]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_tile_matches_the_numpy_reference(host, case):
    results = check.check_tile(host, case)
    assert results and not _failures(results)


@pytest.mark.parametrize(
    "op, shape",
    [
        (Pool2D(3, 3, 1, 1, 1, 1, PoolType.POOL_AVG), (2, 3, 8, 8)),  # Inception-v3's
        (Pool2D(3, 3, 2, 2, 1, 1, PoolType.POOL_AVG), (1, 2, 8, 8)),
        (Pool2D(3, 2, 1, 2, 2, 1, PoolType.POOL_AVG), (1, 2, 6, 6)),  # output (8, 4)
    ],
)
def test_padded_average_tiles_leave_the_padding_out(host, op, shape):
    """Each tile of a 2x2 height-width split, padded by cuDNN (EXCLUDE_PADDING) or explicitly
    (stride 1, one side only), pools and back-propagates the brute-force loops' values over
    the whole image: its divisor is the window's real cells, never kh*kw."""
    from flexflow.gpu import tiles

    sig = op.infer("pool1", [TensorSpec(shape)])
    assert all(size % 2 == 0 for size in sig.output_shape[2:])  # the split's tiles cover it
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    y = loop_pool2d(x, op)
    for coords in [(0, 0, i, j) for i in range(2) for j in range(2)]:
        region = tile_region(sig.output_shape, (1, 1, 2, 2), coords)
        (in_region,) = op.input_regions(sig, region)
        dy = np.zeros_like(y)
        dy[region_slices(region)] = rng.standard_normal(dy[region_slices(region)].shape)
        xs = [host.to_device(x[region_slices(in_region)])]
        (out,) = tiles.forward_tile(host, op, sig, region, xs, [])
        np.testing.assert_allclose(host.to_host(out), y[region_slices(region)], rtol=1e-5)
        ys, dys = [out], [host.to_device(dy[region_slices(region)])]
        (dx,), _ = tiles.backward_tile(host, op, sig, region, xs, [], ys, dys)
        want = loop_pool2d_grad(x, dy, op)[region_slices(in_region)]
        np.testing.assert_allclose(host.to_host(dx), want, rtol=1e-5, atol=1e-6)


def test_batch_norm_shared_statistics(host):
    results = check.check_batch_norm_statistics(host)
    assert len(results) == 6 and not _failures(results)


def test_optimizer_updates_are_bit_identical_to_the_reference(host):
    results = check.check_optimizers(host)
    assert not _failures(results)
    assert all(r.exact for r in results), [r for r in results if not r.exact]


def test_losses(host):
    results = check.check_losses(host, check.load_loss_reference(REPO))
    assert len(results) == 54 and not _failures(results)  # 9 cases x 2 valid counts x 3


def test_every_emulated_kernel_was_launched(host):
    check.run_cases(host, CASES, lambda libraries: True)
    check.check_batch_norm_statistics(host)
    check.check_optimizers(host)
    check.check_losses(host, check.load_loss_reference(REPO))
    assert {base for base, _ in LAUNCHED} == set(KERNELS)


@pytest.fixture
def unbuilt(monkeypatch):
    """The references as `scripts/gpu_check.py` runs them where the C kernels are not built:
    `flexflow.gpu.native_numpy` in place of every `flexflow.ops.native_*` module, and no MKL
    sgemm."""
    import flexflow.ops
    from flexflow import optimizers
    from flexflow.gpu import native_numpy
    from flexflow.ops import batch_norm, blas, conv2d, dropout, embedding, layer_norm, pool2d

    def calls_kernels(value: object) -> bool:
        return isinstance(value, ModuleType) and value.__name__.startswith("flexflow.ops.native_")

    for name in [name for name in sys.modules if name.startswith("flexflow.ops.native_")]:
        monkeypatch.setitem(sys.modules, name, native_numpy)
    users = (flexflow.ops, batch_norm, conv2d, dropout, embedding, layer_norm, pool2d, optimizers)
    for module in users:
        for attribute, value in list(vars(module).items()):
            if calls_kernels(value):
                monkeypatch.setattr(module, attribute, native_numpy)
    monkeypatch.setattr(blas, "sgemm_address", lambda: None)


def test_every_check_runs_on_the_references_without_the_c_kernels(host, unbuilt):
    results, _ = check.run_cases(host, CASES, lambda libraries: True)
    results += check.check_batch_norm_statistics(host)
    results += check.check_optimizers(host)
    results += check.check_losses(host, check.load_loss_reference(REPO))
    assert not _failures(results)  # an AttributeError of the stand-in fails its check


def test_activation_codes_follow_the_emulated_order():
    assert [prims.ACTIVATION_CODES[mode] for mode in ActiMode] == list(range(len(ActiMode)))


def test_function_and_binary_codes_follow_the_emulated_order():
    assert [prims.FUNCTION_CODES[f] for f in UnaryFunction] == list(range(len(UnaryFunction)))
    assert [prims.BINARY_CODES[op.value] for op in BinaryOp] == list(range(len(BinaryOp)))


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("batch", [None, 3])
def test_row_major_gemm_through_column_major_cublas(host, trans_a, trans_b, batch):
    """blas.gemm's operand swap and leading dimensions, against cuBLAS's column-major contract."""
    rng = np.random.default_rng(0)
    lead = () if batch is None else (batch,)
    m, n, k = 4, 5, 3
    a = rng.standard_normal(lead + ((k, m) if trans_a else (m, k))).astype(np.float32)
    b = rng.standard_normal(lead + ((n, k) if trans_b else (k, n))).astype(np.float32)
    c = rng.standard_normal(lead + (m, n)).astype(np.float32)
    op_a = np.swapaxes(a, -1, -2) if trans_a else a
    op_b = np.swapaxes(b, -1, -2) if trans_b else b
    out = host.to_device(c)
    gemm(
        host,
        host.to_device(a),
        host.to_device(b),
        trans_a=trans_a,
        trans_b=trans_b,
        out=out,
        alpha=2.0,
        beta=0.5,
    )
    np.testing.assert_allclose(host.to_host(out), 2.0 * op_a @ op_b + 0.5 * c, rtol=1e-5)


def _small_cnn(batch: int = 8):
    from flexflow import FFConfig, FFModel

    model = FFModel(FFConfig(batch_size=batch))
    x = model.create_tensor((batch, 3, 8, 8), name="image")
    t = model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, activation=ActiMode.AC_MODE_RELU)
    t = model.pool2d(t, 2, 2, 2, 2, 0, 0)
    t = model.dense(model.flat(t), 10)
    model.softmax(t)
    return model.graph()


def test_the_gpu_profile_prices_every_gpu_task_the_simulator_asks_for(host, tmp_path):
    from flexflow.cost import CostModel, Profile, cost_key
    from flexflow.gpu.profile import TASK_OVERHEAD_S, profile_graph_gpu
    from flexflow.machine import parse_machine
    from flexflow.profiler import distinct_tiles, profile_coverage

    graph, machine = _small_cnn(), parse_machine("p100:1")
    progress = []
    profile = profile_graph_gpu(
        graph,
        machine,
        1,
        lambda done, total: progress.append((done, total)),
        lambda: host,
        update_elements=1024,
    )
    held, total = profile_coverage(profile, graph, machine)
    assert held == total == len(profile.times) == progress[-1][0] == progress[-1][1] > 0
    assert all(t.forward_s > TASK_OVERHEAD_S < t.backward_s for t in profile.times.values())
    assert set(profile.update_bytes_per_s) == {"Tesla P100-SXM2"}
    costs, device = CostModel(profile), machine.devices[0]
    for node in graph.ops:
        grads = graph.computes_input_grads(node.id)
        for shape, (region, _) in distinct_tiles(node, machine, 1).items():
            measured = profile.times[cost_key(node, shape, device.model, grads)]
            assert costs.task_time(node, region, device, grads) == measured
    assert Profile.load(profile.save(tmp_path / "gpu.json")) == profile


def test_the_gpu_profile_refuses_a_machine_without_gpus(host):
    from flexflow.errors import MachineError
    from flexflow.gpu.profile import profile_graph_gpu
    from flexflow.machine import parse_machine

    with pytest.raises(MachineError, match="machine 'local' has no GPU devices to measure"):
        profile_graph_gpu(_small_cnn(), parse_machine("local"), context=lambda: host)


def test_a_tile_whose_kernels_fail_is_reported_and_left_to_the_analytic_model(host, monkeypatch):
    from flexflow.gpu import profile as gpu_profile
    from flexflow.gpu import tiles
    from flexflow.machine import parse_machine
    from flexflow.profiler import profile_coverage

    forward = tiles.forward_tile

    def failing(gpu, op, *args):
        if op.kind == "dense":
            raise RuntimeError("no kernel")
        return forward(gpu, op, *args)

    monkeypatch.setattr(gpu_profile.tiles, "forward_tile", failing)
    graph, machine = _small_cnn(), parse_machine("p100:1")
    with pytest.raises(RuntimeError, match="no kernel"):
        gpu_profile.profile_graph_gpu(graph, machine, 1, context=lambda: host)
    failures = []
    profile = gpu_profile.profile_graph_gpu(
        graph,
        machine,
        1,
        context=lambda: host,
        on_failure=lambda *f: failures.append(f),
        update_elements=1024,
    )
    assert failures and {node.kind for node, _, _ in failures} == {"dense"}
    held, total = profile_coverage(profile, graph, machine)
    assert held == total - len(failures) and not any(k[0] == "dense" for k in profile.times)


def test_the_check_report_renders_as_markdown(host):
    results, _ = check.run_cases(host, CASES[:3], lambda libraries: True)
    report = {
        "environment": {"device": "an emulated GPU", "arch": "sm_90"},
        "reference_kernels": "C kernels",
        "results": [r.to_json() for r in results],
        "skipped": ["losses"],
        "timings": [{"kernel": "sgemm", "shape": [8, 8, 8], "ms": 0.5, "tflops": 0.002}],
        "seconds": 1.0,
    }
    text = check.markdown(report)
    assert f"**{len(results)}/{len(results)} results within 0.0001**" in text
    assert "| dense relu | 4 |" in text and "Skipped: losses." in text
    assert "| sgemm | [8, 8, 8] | 0.500 | 0.0 |" in text
    assert check.markdown({"results": []}).endswith("Nothing checked.\n")


def test_a_gather_index_out_of_range_raises_as_the_reference_does(host):
    op = Gather(1)
    sig = op.infer("g", [TensorSpec((2, 3, 4)), TensorSpec((2, 5, 4), DType.INT32)])
    index = np.zeros((2, 5, 4), np.int32)
    index[1, 4, 3] = 3
    x = host.to_device(np.ones((2, 3, 4), np.float32))
    region = tuple((0, s) for s in sig.output_shape)
    with pytest.raises(ShapeError, match=r"gather along dim 1 on GPU: some index values of the "
                       r"tile \(2, 5, 4\) lie outside \[0, 3\) \(input tile \(2, 3, 4\)\)"):  # fmt: skip
        tiles.forward_tile(host, op, sig, region, [x, host.to_device(index)], [])
