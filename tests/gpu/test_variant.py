"""run_tile_gpu's body on the host emulation: strided Legate allocations in, outputs written and
reductions added in place, for every pass of the CPU task body.

Legate is not started: `flexflow.runtime` is replaced by an empty package holding
`flexflow.runtime.passes`, `flexflow.runtime.loss` and the losses it reads
(`flexflow.runtime.loss_functions`), each loaded alone from its file.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from flexflow.gpu import check, variant
from flexflow.gpu.cases import CASES, tile_data
from flexflow.gpu.device import DeviceArray
from flexflow.ops import TensorSpec
from flexflow.ops.batch_norm import BatchNorm
from flexflow.optimizers import AdamOptimizer

from .emulator import HostGpu
from .test_emulated import host  # noqa: F401  (the emulation fixture)

REPO = Path(__file__).resolve().parents[2]


def _runtime_module(name: str) -> types.ModuleType:
    """flexflow/runtime/<name>.py (passes: `Pass`, `FUSED_PASSES`) as its own module, without
    the `flexflow.runtime` package."""
    path = REPO / "flexflow" / "runtime" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"flexflow_{name}_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PASSES = _runtime_module("passes")
LOSS_FUNCTIONS = _runtime_module("loss_functions")
Pass = PASSES.Pass


@pytest.fixture(autouse=True)
def runtime_without_legate(monkeypatch):
    package = types.ModuleType("flexflow.runtime")
    package.__path__ = []
    monkeypatch.setitem(sys.modules, "flexflow.runtime", package)
    monkeypatch.setitem(sys.modules, "flexflow.runtime.passes", PASSES)
    monkeypatch.setitem(sys.modules, "flexflow.runtime.loss_functions", LOSS_FUNCTIONS)
    monkeypatch.setitem(sys.modules, "flexflow.runtime.loss", check.load_loss_reference(REPO))


@dataclass
class Physical:
    """A task argument: `.data().get_inline_allocation()` exposes `__cuda_array_interface__`."""

    array: DeviceArray

    def data(self):
        return self

    def get_inline_allocation(self):
        return self.array


@dataclass
class Context:
    inputs: tuple
    outputs: tuple = ()
    reductions: tuple = ()
    task_stream: int | None = None


@dataclass
class Node:
    op: object
    sig: object
    inputs: tuple
    weights: tuple
    outputs: tuple = (1,)
    id: int = 0  # op 0 of the graph below


class OnePartGradients:
    """Every gradient one store (flexflow.runtime.gradients.GradientStores's answers then)."""

    @staticmethod
    def read_counts(group, index):
        return ()

    @staticmethod
    def alone_read_counts(op, index):
        return ()


@dataclass
class Executor:
    node: Node
    region: tuple
    optimizer: object = None
    update_groups: dict = field(default_factory=dict)
    contributors: dict = field(default_factory=dict)
    staged: dict = field(default_factory=dict)
    timeline_entries: list | None = None
    gradients: object = field(default_factory=lambda: OnePartGradients())
    l2: tuple = ()
    """Each parameter's L2 regularizer's lambda (flexflow.graph.Parameter.l2)."""

    @property
    def fused_tasks(self):
        """The node alone as fused group 0, one task (flexflow.fusion)."""
        from flexflow.fusion import FusedGroup, fused_task

        return [(fused_task(self.graph, FusedGroup((0,), frozenset()), 0, [self.region]),)]

    @property
    def graph(self):
        # every tensor made by some earlier op, so its gradient leaves the task
        made = types.SimpleNamespace(producer=-1)
        params = tuple(types.SimpleNamespace(l2=lam) for lam in self.l2)
        return types.SimpleNamespace(ops={0: self.node}, tensor=lambda tid: made, parameters=params)

    def regions(self, op):
        return (self.region,)

    def input_shard(self, tensor_id, index):
        return self.region

    def staged_tile(self, key, region):
        array = self.staged[key]
        return array[tuple(slice(start, stop) for start, stop in region[: array.ndim])]


def strided(gpu: HostGpu, array: np.ndarray) -> DeviceArray:
    """`array` on the device as a strided view: the middle of a buffer padded on every side,
    as an inline allocation of a store slice can be."""
    padded = np.full(tuple(s + 2 for s in array.shape), -7.0, dtype=array.dtype)
    padded[tuple(slice(1, s + 1) for s in array.shape)] = array
    whole = gpu.to_device(padded)
    strides = whole.element_strides
    return whole.view(array.shape, strides, sum(strides))


def host_of(gpu: HostGpu, view: DeviceArray) -> np.ndarray:
    return gpu.strided(view.ptr, view.dtype, view.shape, view.element_strides).copy()


def _f32(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float32) if a.dtype.kind == "f" else a


def test_forward_and_backward_through_strided_allocations(host):  # noqa: F811
    case = next(c for c in CASES if c.name == "conv2d halo tile")
    data = tile_data(case)
    op, sig, region = case.op, data.sig, data.region
    executor = Executor(Node(op, sig, inputs=(0,), weights=(0, 1)), region, timeline_entries=[])
    # a fused task's inputs: the input tile, then the weights (TaskLayout order)
    ins = [Physical(strided(host, _f32(a))) for a in data.inputs + data.weights]
    (y_ref,) = op.forward_tile(sig, region, data.inputs, data.weights)
    out = Physical(strided(host, np.zeros(y_ref.shape, np.float32)))
    variant._run(host, Context(tuple(ins), (out,)), executor, Pass.FUSED_FORWARD, 0, 0, (1, 0))
    assert check.compare("fwd", "y", host_of(host, out.array), y_ref).ok
    assert [entry[:3] for entry in executor.timeline_entries] == [(0, 0, Pass.FORWARD)]

    # the same forward followed by the loss in the same task (the last group's FUSED_FORWARD_LOSS)
    loss = sys.modules["flexflow.runtime.loss"]
    loss_id = loss.LOSS_IDS.index("mean_squared_error")
    target = np.random.default_rng(2).standard_normal(y_ref.shape).astype(np.float32)
    grad_out = Physical(strided(host, np.zeros_like(y_ref, dtype=np.float32)))
    sums = Physical(strided(host, np.array([[0.5, 1.0]])))  # this task's row: overwritten
    out = Physical(strided(host, np.zeros(y_ref.shape, np.float32)))
    context = Context(tuple(ins) + (Physical(strided(host, target)),), (out, grad_out, sums))
    total = y_ref.size + 3  # this tile is part of a larger batch
    extra = (1, 0, loss_id, total, y_ref.shape[0], -1)
    variant._run(host, context, executor, Pass.FUSED_FORWARD_LOSS, 0, 0, extra)
    value, want_grad, correct = loss.loss_tile(loss_id, y_ref, target, total, y_ref.shape[0])
    assert check.compare("loss", "grad", host_of(host, grad_out.array), want_grad).ok
    np.testing.assert_allclose(host_of(host, sums.array), [[value, correct]], rtol=1e-5)

    # forward, loss and backward in one task (FUSED_STEP): the backward seeded by the loss;
    # the activations and the loss gradient stay in memory, so the outputs are the loss row
    # and the partial weight gradients
    (sx,), sw = op.backward_tile(sig, region, data.inputs, data.weights, (y_ref,), (want_grad,))
    currents = [Physical(strided(host, np.ones((1,) + g.shape, np.float32))) for g in sw]
    targets = [Physical(strided(host, np.zeros((1,) + g.shape, np.float32))) for g in sw]
    dx = Physical(strided(host, np.ones(sx.shape, np.float32)))
    sums = Physical(strided(host, np.array([[0.5, 1.0]])))
    context = Context(
        tuple(ins) + (Physical(strided(host, target)),) + tuple(currents),
        (sums, *targets),
        (dx,),
    )
    variant._run(host, context, executor, Pass.FUSED_STEP, 0, 0, extra)
    np.testing.assert_allclose(host_of(host, sums.array), [[value, correct]], rtol=1e-5)
    for physical, want in zip([dx, *targets], (sx, *sw), strict=True):
        got = host_of(host, physical.array).reshape(want.shape)
        assert check.compare("step", "grad", got, want + 1).ok

    (gx_ref,), gw_ref = op.backward_tile(
        sig, region, data.inputs, data.weights, (y_ref,), data.grad_outputs
    )
    extra = [Physical(strided(host, _f32(a))) for a in (y_ref,) + data.grad_outputs]
    # reductions start at 1: the task must add into them, never overwrite; the partial weight
    # gradients (a leading device axis) are read after the inputs and written as outputs
    reductions = [Physical(strided(host, np.ones(gx_ref.shape, np.float32)))]
    currents = [Physical(strided(host, np.ones((1,) + g.shape, np.float32))) for g in gw_ref]
    targets = [Physical(strided(host, np.zeros((1,) + g.shape, np.float32))) for g in gw_ref]
    context = Context(tuple(ins + extra + currents), tuple(targets), tuple(reductions))
    variant._run(host, context, executor, Pass.FUSED_BACKWARD, 0, 0, (1, 0))
    for physical, want in zip(reductions + targets, (gx_ref, *gw_ref), strict=True):
        got = host_of(host, physical.array).reshape(want.shape)
        assert check.compare("bwd", "grad", got, want + 1).ok

    # the output's gradient kept in two parts (flexflow.runtime.gradients): two arguments, summed
    (dy,) = data.grad_outputs
    parts = [Physical(strided(host, _f32(dy * share))) for share in (0.25, 0.75)]
    executor.gradients = SplitGradients((1, 1, 1, 1, 2))  # x, kernel, bias, y, then dy's parts
    reductions = [Physical(strided(host, np.ones(gx_ref.shape, np.float32)))]
    targets = [Physical(strided(host, np.zeros((1,) + g.shape, np.float32))) for g in gw_ref]
    inputs = ins + [Physical(strided(host, _f32(y_ref))), *parts] + currents
    context = Context(tuple(inputs), tuple(targets), tuple(reductions))
    variant._run(host, context, executor, Pass.FUSED_BACKWARD, 0, 0, (1, 0))
    for physical, want in zip(reductions + targets, (gx_ref, *gw_ref), strict=True):
        got = host_of(host, physical.array).reshape(want.shape)
        assert check.compare("bwd parts", "grad", got, want + 1).ok


@dataclass
class SplitGradients(OnePartGradients):
    """A fused backward whose input slots arrive as `counts` arguments each."""

    counts: tuple[int, ...]

    def read_counts(self, group, index):
        return self.counts


def test_batch_norm_statistics_passes(host):  # noqa: F811
    """Each statistics task writes its row (flexflow.runtime.batch_statistics); the forward
    and backward tasks sum every task's row."""
    op = BatchNorm(relu=True)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    sig = op.infer("bn", [TensorSpec(x.shape)])
    region = ((0, 4), (0, 3), (0, 2), (0, 2))
    executor = Executor(Node(op, sig, (0,), (0, 1)), region)
    row = Physical(strided(host, np.full((1, 2, 3), 5.0)))  # overwritten
    context = Context((Physical(strided(host, x)),), (row,))
    variant._run(host, context, executor, Pass.STATISTICS_FORWARD, 0, 0, ())
    want = op.statistics_forward(x.astype(np.float64))
    assert check.compare("stats", "sums", host_of(host, row.array)[0], want).ok

    # the forward reads two tasks' rows (the other's a zero row) and normalizes with their sum
    rows = np.stack([want / 4, want * 3 / 4])
    weights = [np.ones(3, np.float32), np.zeros(3, np.float32)]
    (y_ref,) = op.forward_tile_with_statistics(sig, x, weights, want)
    out = Physical(strided(host, np.zeros(y_ref.shape, np.float32)))
    args = (Physical(strided(host, x)), *(Physical(strided(host, w)) for w in weights))
    context = Context((*args, Physical(strided(host, rows))), (out,))
    variant._run(host, context, executor, Pass.FORWARD, 0, 0, ())
    assert check.compare("bn", "y", host_of(host, out.array), y_ref).ok


def test_update_loss_and_feed_passes(host):  # noqa: F811
    rng = np.random.default_rng(1)
    optimizer = AdamOptimizer(1e-2)
    weight, grad = (rng.standard_normal((3, 4)).astype(np.float32) for _ in range(2))
    states = [np.zeros_like(weight), np.zeros_like(weight)]
    outs = [Physical(strided(host, np.zeros_like(weight))) for _ in range(3)]
    # gradients arrive as every contributing device's partial gradient, a (1, ...) row each
    # argument, summed: weight 0 has two contributors, weight 1 one
    partials = (grad[None], np.zeros_like(grad)[None])
    ins = tuple(Physical(strided(host, a)) for a in (weight, *partials, *states))
    # two weight tiles on this device, one task: inputs (w, g..., m, v) per tile, outputs (w, m, v)
    # weight 1 has an L2 regularizer (flexflow.regularizers): its gradient gains 0.5 * w
    updater = Executor(None, (), optimizer, update_groups={0: [(0, ()), (1, ())]},
                       contributors={0: (0, 1), 1: (0,)}, l2=(0.0, 0.5))  # fmt: skip
    outs += [Physical(strided(host, np.zeros_like(weight))) for _ in range(3)]
    ins = ins + tuple(Physical(strided(host, a)) for a in (weight, 2 * grad[None], *states))
    variant._run(host, Context(ins, tuple(outs)), updater, Pass.UPDATE, 0, -1, (1,))
    first = optimizer.update(weight, grad, states, 1)
    second = optimizer.update(weight, 2 * grad, states, 1, l2=0.5)
    wants = (first[0], *first[1], second[0], *second[1])
    for physical, want in zip(outs, wants, strict=True):
        np.testing.assert_array_equal(host_of(host, physical.array), want)

    loss = sys.modules["flexflow.runtime.loss"]
    probs = rng.uniform(0.1, 1.0, (4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2], dtype=np.int64)
    loss_id = loss.LOSS_IDS.index("sparse_categorical_crossentropy")
    grad_out = Physical(strided(host, np.zeros_like(probs)))
    sums = Physical(strided(host, np.array([[0.5, 1.0]])))
    context = Context(
        (Physical(strided(host, probs)), Physical(strided(host, labels))), (grad_out, sums)
    )
    variant._run(host, context, Executor(None, ()), Pass.LOSS, 0, 0, (loss_id, 8, 3, -1))
    value, want_grad, correct = loss.loss_tile(loss_id, probs, labels, 8, 3)
    np.testing.assert_allclose(host_of(host, sums.array), [[value, correct]], rtol=1e-6)
    np.testing.assert_allclose(host_of(host, grad_out.array), want_grad, rtol=1e-6)
    # the same with the labels staged in the process (rows 1..3 of a batch of 5)
    tile = Executor(None, ((1, 5), (0, 3)), staged={7: np.concatenate([[9], labels])})
    sums = Physical(strided(host, np.array([[0.5, 1.0]])))
    context = Context((Physical(strided(host, probs)),), (grad_out, sums))
    variant._run(host, context, tile, Pass.LOSS, 0, 0, (loss_id, 8, 3, 7))
    np.testing.assert_allclose(host_of(host, sums.array), [[value, correct]], rtol=1e-6)

    ids = rng.integers(0, 9, (4, 5)).astype(np.int32)
    fed = Physical(strided(host, np.zeros_like(ids)))
    variant._run(
        host,
        Context((Physical(strided(host, ids)),), (fed,)),
        Executor(None, ()),
        Pass.FEED,
        0,
        0,
        (),
    )
    np.testing.assert_array_equal(host_of(host, fed.array), ids)
    batch = rng.integers(0, 9, (6, 5)).astype(np.int32)  # staged: rows 2..5 are this shard
    fed = Physical(strided(host, np.zeros_like(ids)))
    feeder = Executor(None, ((2, 6), (0, 5)), staged={3: batch})
    variant._run(host, Context((), (fed,)), feeder, Pass.FEED, 0, 0, (3,))
    np.testing.assert_array_equal(host_of(host, fed.array), batch[2:6])


def test_every_pass_of_the_task_body_is_handled():
    source = (REPO / "flexflow" / "gpu" / "variant.py").read_text()
    fused = PASSES.FUSED_PASSES  # dispatched as a whole to flexflow.fused_run
    assert "if which in FUSED_PASSES:" in source
    for member in Pass:
        handled = f"Pass.{member.name}" in source or member in fused
        assert handled, f"run_tile_gpu does not handle {member.name}"


def test_results_that_do_not_fit_their_store_are_refused(host):  # noqa: F811
    value = host.to_device(np.zeros((2, 3), np.float32))
    with pytest.raises(Exception, match=r"does not fit its store \(4,\) float32"):
        variant._write(host, Physical(host.to_device(np.zeros(4, np.float32))), value)
