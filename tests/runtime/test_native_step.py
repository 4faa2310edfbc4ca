"""flexflow.runtime.native_step and step_program: which step tasks run as one C call, and that
the call computes what the op-by-op step (flexflow.fused_run with the CPU tiles) computes: the
same weight gradients and loss to the softmax's float32 rounding, the same correct count; for
dense chains and for unrolled RNNs, whose tensors have several readers and whose layers' steps
share weights; for CNNs with the op-by-op step's poolings computed by brute-force loops."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from flexflow import ActiMode, DataType, FFConfig, FFModel
from flexflow._kernels import lib
from flexflow.errors import ShapeError
from flexflow.fused_run import run_fused_task
from flexflow.fusion import SlotKind, fuse, fused_task, sole_gradients
from flexflow.machine import parse_machine
from flexflow.ops import blas
from flexflow.ops.pool2d import PoolType
from flexflow.runtime.cpu_tiles import CpuTiles
from flexflow.runtime.loss import loss_tile
from flexflow.runtime.native_step import SPARSE_CROSSENTROPY, native_step
from flexflow.runtime.passes import Pass
from flexflow.runtime.step_program import ADD, PART, WRITE, program, why_not
from flexflow.strategies import named_strategy
from tests.ops.pool_loops import loop_pool2d_backward, loop_pool2d_forward

pytestmark = pytest.mark.skipif(blas.sgemm_address() is None, reason="MKL is not installed")


def _classifier(shape, activation=ActiMode.AC_MODE_RELU, use_bias=True, softmax=True):
    model = FFModel(FFConfig(batch_size=shape[0]))
    x = model.create_tensor(shape, name="x")
    if len(shape) == 4:  # an image: flattened first
        x = model.flat(x)
    x = model.dense(x, 12, activation, use_bias=use_bias)
    x = model.dense(x, 5)
    if softmax:
        model.softmax(x)
    return model.graph()


def _task(graph, machine="local", index=0):
    """Data parallelism's step task `index`, its devices taken for CPUs (whose tasks may read
    a time step of a sequence made in the task)."""
    devices = parse_machine(machine)
    strategy = named_strategy("dp", graph, devices)
    regions = [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]
    (group,) = fuse(graph, strategy, regions, frozenset(range(devices.num_devices)))
    sole = sole_gradients(graph, strategy, regions, (group,))
    return fused_task(graph, group, index, [regions[op][index] for op in group.ops], sole)


def test_dense_relu_chains_ending_in_a_softmax_run_as_one_call():
    assert native_step(_task(_classifier((8, 6)))) is not None
    assert native_step(_task(_classifier((8, 6), ActiMode.AC_MODE_NONE, False))) is not None
    assert native_step(_task(_classifier((8, 3, 6)))) is not None  # per-token predictions
    assert native_step(_task(_classifier((8, 1, 4, 4)))) is not None  # flat, then the chain
    for activation in (ActiMode.AC_MODE_TANH, ActiMode.AC_MODE_GELU, ActiMode.AC_MODE_ELU):
        assert native_step(_task(_classifier((8, 6), activation))) is not None
    assert native_step(_task(_classifier((8, 6), softmax=False))) is None


def _arrays(task, rng):
    values = {}
    for slot in task.forward.inputs:
        shape = tuple(stop - start for start, stop in slot.region)
        values[slot] = (rng.standard_normal(shape) * 0.5).astype(np.float32)
    grads = {
        slot: np.full(tuple(b - a for a, b in slot.region), np.nan, np.float32)
        for slot in task.backward.overwrites
    }
    return values, grads


def _op_by_op(task, values, labels, total, valid):
    """The step as the CPU task body runs it without the C program."""
    grads = {
        s: np.full_like(a, np.nan) for s, a in _arrays(task, np.random.default_rng(0))[1].items()
    }
    sums = np.zeros(2)

    def loss_into(op, index, loss_args, prediction, stored, grad, row):
        value, gradient, correct = loss_tile(loss_args[0], prediction, stored, loss_args[1], valid)
        row[...] = (value, correct)
        return np.asarray(gradient, dtype=np.float32)

    inputs = [values[s] for s in task.forward.inputs] + [labels]
    outputs = [sums, *(grads[s] for s in task.backward.overwrites)]
    extra = (1, 1, SPARSE_CROSSENTROPY, total, valid, -1)
    passes = (Pass.FORWARD, Pass.LOSS, Pass.BACKWARD)
    run_fused_task(
        task, CpuTiles, "step", (inputs, outputs, []), extra, None, passes, lambda a: a, loss_into
    )
    return grads, sums


@pytest.mark.parametrize(
    "shape, padding, use_bias",
    [
        ((8, 6), 0, True),
        ((8, 6), 1, True),  # a padded last batch: the first sample of the tile counts
        ((8, 6), 2, True),  # all padding
        ((8, 6), 0, False),
        ((6, 3, 7), 1, True),  # per-token predictions
        ((8, 2, 3, 3), 0, True),  # an image, flattened
    ],
)
@pytest.mark.parametrize("index", [0, 1])
def test_the_c_step_computes_the_op_by_op_step(shape, padding, use_bias, index):
    graph = _classifier(shape, use_bias=use_bias)
    task = _task(graph, "p100:1", index)  # data parallelism: this device's share of the batch
    program = native_step(task)
    rng = np.random.default_rng(index)
    values, grads = _arrays(task, rng)
    samples = task.tiles[-1][0][1] - task.tiles[-1][0][0]
    per_sample = () if len(shape) == 4 else shape[1:-1]  # an image's model predicts once
    labels = rng.integers(0, 5, (samples, *per_sample))
    total, valid = shape[0] * int(np.prod(per_sample, dtype=int)), samples - padding
    sums = np.zeros(2)
    program.run(blas.sgemm_address(), values, grads, labels, sums, total, valid)
    want_grads, want_sums = _op_by_op(task, values, labels, total, valid)
    for slot, got in grads.items():
        np.testing.assert_allclose(got, want_grads[slot], rtol=1e-5, atol=1e-7)
    assert sums[0] == pytest.approx(want_sums[0], rel=1e-6)
    assert sums[1] == want_sums[1]


def test_a_label_out_of_range_is_refused_as_the_reference_refuses_it():
    task = _task(_classifier((8, 6)), "p100:1")  # the first device's 2 samples
    rng = np.random.default_rng(0)
    values, grads = _arrays(task, rng)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 5\)"):
        native_step(task).run(
            blas.sgemm_address(), values, grads, np.array([0, 5]), np.zeros(2), 8, 2
        )


@pytest.mark.parametrize("kind", ["dense chain", "language_model"])
def test_flat_buffers_give_the_same_step_as_separate_arrays(kind):
    """`run_flat` (parameters in one flat buffer, the executor's data-parallel layout) finds
    every weight and gradient at its offset, shared ones included: the same bits as `run`
    with separate arrays."""
    from flexflow.runtime.flat import FlatLayout

    chain = kind == "dense chain"
    graph = _classifier((8, 6)) if chain else _rnn(kind)
    flat = FlatLayout.of([p.spec.shape for p in graph.parameters])
    task = _task(graph, "p100:1", 1)
    rng = np.random.default_rng(5)
    values, grads = (_arrays if chain else _rnn_arrays)(task, rng)
    weights = {s.id: values[s] for s in task.forward.inputs[1:]}
    flat_weights = flat.join([weights[p.id] for p in graph.parameters])
    flat_grads = np.full(flat.size, np.nan, np.float32)
    x, labels = values[task.forward.inputs[0]], rng.integers(0, 5, (2,) if chain else (2, 3))
    total = 8 if chain else 24
    sums, flat_sums = np.zeros(2), np.zeros(2)
    gemm = blas.sgemm_address()
    native_step(task).run(gemm, values, grads, labels, sums, total, 2)
    native_step(task, flat).run_flat(
        gemm, [x], flat_weights, flat_grads, labels, flat_sums, total, 2
    )
    np.testing.assert_array_equal(flat_sums, sums)
    views = flat.split(flat_grads, [s.id for s in task.backward.overwrites])
    for view, slot in zip(views, task.backward.overwrites, strict=True):
        np.testing.assert_array_equal(view, grads[slot])


VOCAB, CLASSES = 20, 5


def _rnn(kind: str, batch: int = 8, length: int = 3):
    """An unrolled RNN on token ids: a tagger (a class per token from one layer's states), a
    language model (two layers, a softmax per token), a classifier (the last state), or a
    translator (NMT: a source and a target, encoder and decoder layers, attention of the
    decoder's states over the encoder's, with 2 heads; the zoo's has one)."""
    model = FFModel(FFConfig(batch_size=batch))
    tokens = model.create_tensor((batch, length), DataType.DT_INT32, name="x")
    x = model.embedding(tokens, VOCAB, 6)
    if kind == "translator":
        target = model.create_tensor((batch, length), DataType.DT_INT32, name="target")
        encoded = model.lstm(x, 8)
        decoded = model.lstm(model.lstm(model.embedding(target, VOCAB, 4), 6), 8)
        x = model.multihead_attention(decoded, encoded, encoded, 8, 2)
    elif kind == "tagger":
        x = model.lstm(x, 8)
    elif kind == "language_model":
        x = model.lstm(model.lstm(x, 8), 7)
    else:
        x = model.lstm(x, 8, return_sequences=False)
    model.softmax(model.dense(x, CLASSES))
    return model.graph()


RNNS = ("tagger", "language_model", "classifier", "translator")


def _rnn_arrays(task, rng):
    values, grads = _arrays(task, rng)
    for slot in task.forward.inputs:
        if slot.kind is SlotKind.TENSOR:  # token ids
            values[slot] = rng.integers(0, VOCAB, values[slot].shape).astype(np.int32)
    return values, grads


@pytest.mark.parametrize("kind", RNNS[:3])
def test_unrolled_rnns_run_as_one_call_summing_gradients_in_the_op_by_op_order(kind):
    """The program's gradient plan: the sequence read by time steps is zeroed once, by the
    reader whose backward runs first, and every reader adds its part; a layer's weights are
    written by its last step and added to by the others; every other tensor is written by
    its first reader in the backward and added to by the rest."""
    graph = _rnn(kind)
    made = program(_task(graph, "p100:1", 1))
    assert made is not None and made.dtype(0) == np.int32 and made.inputs[0][1] == 0
    kinds = [op.kind for op in made.ops]
    assert kinds[0] == lib.FF_STEP_EMBEDDING and kinds[-1] == lib.FF_STEP_SOFTMAX
    assert kinds.count(lib.FF_STEP_LSTM) == {"language_model": 6}.get(kind, 3)
    embedded = made.ops[0].step.outputs[0][0]
    assert [op for op in made.ops if op.zeroes is not None] == [made.ops[3]]  # the last step
    assert made.ops[3].zeroes == embedded
    first_layer = made.ops[1:4]
    assert all(op.grads[0] == PART and op.offset == t * 6 for t, op in enumerate(first_layer))
    assert [op.weight_adds for op in first_layer] == [(True,) * 3] * 2 + [(False,) * 3]
    seen: set[int] = set()
    for op in reversed(made.ops):
        for tensor, mode in zip(op.reads, op.grads, strict=True):
            if mode in (WRITE, ADD):
                assert mode == (ADD if tensor in seen else WRITE)
            seen.add(tensor)


@pytest.mark.parametrize("kind", RNNS)
@pytest.mark.parametrize("index, padding", [(0, 0), (1, 0), (1, 1)])
def test_the_c_step_of_an_rnn_computes_the_op_by_op_step(kind, index, padding):
    graph = _rnn(kind)
    task = _task(graph, "p100:1", index)  # 2 of the 8 samples
    rng = np.random.default_rng(index)
    values, grads = _rnn_arrays(task, rng)
    per_sample = (3,) if kind != "classifier" else ()
    labels = rng.integers(0, CLASSES, (2, *per_sample))
    total, valid = 8 * int(np.prod(per_sample, dtype=int)), 2 - padding
    sums = np.zeros(2)
    native_step(task).run(blas.sgemm_address(), values, grads, labels, sums, total, valid)
    want_grads, want_sums = _op_by_op(task, values, labels, total, valid)
    assert set(grads) == set(want_grads)
    for slot, got in grads.items():
        np.testing.assert_allclose(got, want_grads[slot], rtol=1e-5, atol=1e-7)
    assert sums[0] == pytest.approx(want_sums[0], rel=1e-6)
    assert sums[1] == want_sums[1]


def test_an_id_outside_the_table_is_refused_as_the_reference_refuses_it():
    task = _task(_rnn("tagger"), "p100:1")
    rng = np.random.default_rng(0)
    values, grads = _rnn_arrays(task, rng)
    values[task.forward.inputs[0]][1, 2] = VOCAB
    with pytest.raises(ShapeError, match=r"ids must lie in \[0, 20\), got ids in \[\d+, 20\]"):
        native_step(task).run(
            blas.sgemm_address(), values, grads, np.zeros((2, 3), int), np.zeros(2), 24, 2
        )


def test_a_run_is_told_why_a_step_is_not_one_c_call():
    """`why_not` names the first op the C step has no kernel for, or the layout it cannot take;
    the run's log prints it (Executor.describe_kernels)."""
    assert program_reason(_classifier((8, 6))) is None
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 2, 6, 6), name="image")
    x = model.conv2d(x, 3, 3, 3, 1, 1, 1, 1)
    x = model.transpose(x, (0, 1, 3, 2), name="swap")
    model.softmax(model.dense(model.flat(x), CLASSES))
    graph = model.graph()
    assert program_reason(graph, "p100:1") == (
        f"the C step has no kernel for {graph.ops[1].kind} 'swap' as configured"
    )


def _gated(width: int):
    """A dense layer's output (8, 5, 2) times another's (8, 5, width), as FlexFlow's Keras
    example elementwise_mul_broadcast (width 1: repeated along the last dimension)."""
    model = FFModel(FFConfig(batch_size=8))
    h = model.dense(model.create_tensor((8, 6), name="x"), 10, ActiMode.AC_MODE_RELU)
    gate = model.reshape(model.dense(h, 5 * width), (8, 5, width))
    x = model.multiply(gate, model.reshape(h, (8, 5, 2)), name="times")
    model.softmax(model.dense(model.reshape(x, (8, 10)), CLASSES))
    return model.graph()


def test_a_broadcasting_binary_op_is_not_one_c_call():
    """native/step.c's binary op reads operands of the output's shape: a broadcasting one
    runs op by op (flexflow.ops.element_binary's numpy rules), never read past its input."""
    assert program_reason(_gated(2)) is None
    assert program_reason(_gated(1)) == (
        "the C step has no kernel for element_binary 'times' as configured"
    )


def program_reason(graph, machine="local"):
    return why_not(_task(graph, machine))


def test_a_step_the_c_program_cannot_run_runs_op_by_op():
    """An unrolled RNN whose states are transposed (no C kernel in the program): no program,
    the step runs op by op."""
    model = FFModel(FFConfig(batch_size=8))
    tokens = model.create_tensor((8, 3), DataType.DT_INT32, name="x")
    states = model.lstm(model.embedding(tokens, VOCAB, 6), 8)
    states = model.transpose(model.transpose(states, (0, 2, 1)), (0, 2, 1))
    model.softmax(model.dense(states, CLASSES))
    assert program(_task(model.graph(), "p100:1")) is None


@pytest.fixture
def loop_pools(monkeypatch):
    """The op-by-op step's poolings by the one-cell-at-a-time loops (tests/ops/pool_loops.py)
    instead of the C kernels the C step also calls: the C step's average must leave the padding
    out of its divisor on its own, not merely agree with the kernel it shares."""
    import flexflow.ops.pool2d as pool2d

    loops = SimpleNamespace(
        pool2d_forward=loop_pool2d_forward, pool2d_backward=loop_pool2d_backward
    )
    monkeypatch.setattr(pool2d, "native_windows", loops)


def _cnn(padded: bool):
    """LeNet's shape (convolutions, max pooling, a flat, dense layers), or AlexNet's: with
    padding, strides, a relu convolution without bias, average pooling with padding (the
    border windows' divisors count their real cells only) and dropouts."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 2, 12, 12), name="image")
    if padded:
        x = model.conv2d(x, 3, 3, 3, 2, 2, 1, 1, ActiMode.AC_MODE_RELU, use_bias=False)
        x = model.dropout(model.pool2d(x, 3, 3, 1, 1, 1, 1, PoolType.POOL_AVG), 0.3, seed=5)
    else:
        x = model.pool2d(model.conv2d(x, 4, 5, 5, 1, 1, 0, 0), 2, 2, 2, 2, 0, 0)
        x = model.pool2d(model.conv2d(x, 5, 3, 3, 1, 1, 0, 0), 2, 2, 2, 2, 0, 0)
    x = model.dense(model.flat(x), 7, ActiMode.AC_MODE_RELU)
    if padded:
        x = model.dropout(x, 0.5)
    model.softmax(model.dense(x, CLASSES))
    return model.graph()


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("index", [0, 1])
def test_the_c_step_of_a_cnn_computes_the_op_by_op_step(padded, index, loop_pools):
    task = _task(_cnn(padded), "p100:1", index)  # 2 of the 8 images
    made = program(task)
    assert made is not None
    kinds = [op.kind for op in made.ops]
    assert lib.FF_STEP_CONV in kinds and lib.FF_STEP_POOL in kinds  # the flat reads in place
    assert (lib.FF_STEP_DROPOUT in kinds) == padded
    rng = np.random.default_rng(index)
    values, grads = _arrays(task, rng)
    labels = rng.integers(0, CLASSES, 2)
    sums = np.zeros(2)
    program_step = native_step(task)
    program_step.run(blas.sgemm_address(), values, grads, labels, sums, 8, 2, iteration=1)
    want_grads, want_sums = _op_by_op(task, values, labels, 8, 2)  # iteration 1
    for slot, got in grads.items():
        np.testing.assert_allclose(got, want_grads[slot], rtol=1e-5, atol=1e-6)
    assert sums[0] == pytest.approx(want_sums[0], rel=1e-6)
    assert sums[1] == want_sums[1]
    if padded:  # another iteration draws other dropout masks
        program_step.run(blas.sgemm_address(), values, grads, labels, sums, 8, 2, iteration=2)
        assert sums[0] != pytest.approx(want_sums[0], rel=1e-6)


@pytest.mark.parametrize("activation", list(ActiMode))
def test_every_dense_activation_computes_the_op_by_op_step(activation):
    graph = _classifier((8, 3, 6), activation)
    task = _task(graph, "p100:1", 1)
    rng = np.random.default_rng(3)
    values, grads = _arrays(task, rng)
    labels = rng.integers(0, 5, (2, 3))
    sums = np.zeros(2)
    native_step(task).run(blas.sgemm_address(), values, grads, labels, sums, 24, 2)
    want_grads, want_sums = _op_by_op(task, values, labels, 24, 2)
    for slot, got in grads.items():
        np.testing.assert_allclose(got, want_grads[slot], rtol=1e-5, atol=1e-7)
    assert sums[0] == pytest.approx(want_sums[0], rel=1e-6)


def _encoder(kind: str):
    """The zoo's transformer (token and position embeddings added, layer norms, self-attention,
    GELU feed-forward layers, dropouts, residual adds, the first token split off and reshaped,
    a tanh pooler), or a model of the other element-wise ops: sigmoid and GELU ops of their
    own, a subtract, a multiply, a layer norm over two axes without gamma and beta, a split
    whose both parts are read, a concatenation reading one of them twice, a mean."""
    from flexflow.zoo import load_model

    if kind == "transformer":
        sizes = dict(seq_length=4, vocab_size=VOCAB, hidden_size=8, num_layers=2, num_heads=2)
        return load_model(
            "transformer", FFConfig(batch_size=8), **sizes, ff_size=16, num_classes=CLASSES
        ).graph()
    model = FFModel(FFConfig(batch_size=8))
    tokens = model.create_tensor((8, 4), DataType.DT_INT32, name="x")
    x = model.embedding(tokens, VOCAB, 6)
    gated = model.multiply(model.sigmoid(model.dense(x, 6)), model.gelu(x))
    x = model.layer_norm(model.subtract(gated, x), (-2, -1), elementwise_affine=False)
    first, rest = model.split(x, [1, 3], 1)
    rest = model.concat([rest, first, rest], axis=1)  # (8, 7, 6): a part read twice
    x = model.add(model.reshape(first, (8, 6)), model.dense(model.reshape(rest, (8, 42)), 6))
    x = model.add(x, model.mean(rest, [1]))  # (8, 6)
    model.softmax(model.dense(x, CLASSES))
    return model.graph()


@pytest.mark.parametrize("kind", ["transformer", "element_wise"])
@pytest.mark.parametrize("index, padding", [(0, 0), (1, 1)])
def test_the_c_step_of_a_transformer_computes_the_op_by_op_step(kind, index, padding):
    task = _task(_encoder(kind), "p100:1", index)  # 2 of the 8 sequences
    made = program(task)
    assert made is not None, why_not(task)
    kinds = {op.kind for op in made.ops}
    for name in ("BINARY", "LAYER_NORM", "SPLIT", "EMBEDDING"):
        assert getattr(lib, f"FF_STEP_{name}") in kinds
    assert (lib.FF_STEP_UNARY in kinds) == (kind == "element_wise")  # sigmoid, GELU ops
    assert (lib.FF_STEP_CONCAT in kinds) == (kind == "element_wise")
    assert (lib.FF_STEP_MEAN in kinds) == (kind == "element_wise")
    if kind == "transformer":
        assert lib.FF_STEP_ATTENTION in kinds and lib.FF_STEP_DROPOUT in kinds
        assert len(made.inputs) == 2  # token and position ids
    else:
        codes = {op.dims[3] for op in made.ops if op.kind == lib.FF_STEP_BINARY}
        assert codes == {lib.FF_BINARY_ADD, lib.FF_BINARY_SUBTRACT, lib.FF_BINARY_MULTIPLY}
    rng = np.random.default_rng(index)
    values, grads = _rnn_arrays(task, rng)
    labels = rng.integers(0, CLASSES, 2)
    sums = np.zeros(2)
    native_step(task).run(blas.sgemm_address(), values, grads, labels, sums, 8, 2 - padding, 1)
    want_grads, want_sums = _op_by_op(task, values, labels, 8, 2 - padding)  # iteration 1
    assert set(grads) == set(want_grads)
    for slot, got in grads.items():
        np.testing.assert_allclose(got, want_grads[slot], rtol=2e-5, atol=1e-6)
    assert sums[0] == pytest.approx(want_sums[0], rel=1e-6)
    assert sums[1] == want_sums[1]


def _residual(relu_first: bool = True):
    """A small ResNet block: convolutions (the direct kernels' and im2col's), batch norms with
    and without relu, a 1x1 projection at stride 2 (which reads all but its input's last row
    and column), a residual add, average pooling."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 2, 12, 12), name="image")
    x = model.batch_norm(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, use_bias=False), relu=relu_first)
    y = model.batch_norm(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1), relu=False)
    y = model.batch_norm(model.conv2d(y, 4, 3, 3, 2, 2, 1, 1), relu=True)  # im2col: stride 2
    shortcut = model.batch_norm(model.conv2d(x, 4, 1, 1, 2, 2, 0, 0), relu=False)
    x = model.relu(model.add(shortcut, y))
    x = model.pool2d(x, 2, 2, 2, 2, 0, 0, PoolType.POOL_AVG)
    model.softmax(model.dense(model.flat(x), CLASSES))
    return model.graph()


def _points(graph, machine: str):
    """Data parallelism's step tasks on every device, its batch norms exchanging statistics in
    one concurrent launch (flexflow.launches.run_groups)."""
    devices = parse_machine(machine)
    strategy = named_strategy("dp", graph, devices)
    regions = [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]
    cpus = frozenset(range(devices.num_devices))
    norms = frozenset(i for i, node in enumerate(graph.ops) if node.kind == "batch_norm")
    (group,) = fuse(graph, strategy, regions, cpus, norms if devices.num_devices > 1 else cpus)
    sole = sole_gradients(graph, strategy, regions, (group,))
    tiles = range(strategy[0].num_tasks)
    return [fused_task(graph, group, i, [regions[op][i] for op in group.ops], sole) for i in tiles]


def _concurrently(work, points: int) -> list:
    """work(point) on `points` threads at once (the points of a concurrent launch)."""
    from flexflow.step_profiler import run_together

    results = [None] * points

    def at(point):
        return lambda _: results.__setitem__(point, work(point))

    run_together([at(p) for p in range(points)], 0, 1)
    return results


def _inception():
    """Inception-v3's shapes: a stem, then a 1x3 and a 3x1 convolution of its output (paddings
    0,1 and 1,0), batch norms, a concatenation, average pooling with padding."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 3, 12, 12), name="image")
    x = model.batch_norm(model.conv2d(x, 4, 3, 3, 1, 1, 1, 1, use_bias=False))  # the stem
    wide = model.batch_norm(model.conv2d(x, 4, 1, 3, 1, 1, 0, 1, use_bias=False))
    tall = model.batch_norm(model.conv2d(x, 3, 3, 1, 1, 1, 1, 0, use_bias=False))
    x = model.pool2d(model.concat([wide, tall], 1), 3, 3, 1, 1, 1, 1, PoolType.POOL_AVG)
    model.softmax(model.dense(model.flat(x), CLASSES))
    return model.graph()


def _normalized_input(rank: int):
    """A batch norm reading the model's input (input normalization), which has no gradient:
    the C step wrote one through a null pointer (a crash, signal 11)."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 2, 6, 6) if rank == 4 else (8, 12), name="features")
    x = model.batch_norm(x, relu=False)
    model.softmax(model.dense(model.flat(x) if rank == 4 else x, CLASSES))
    return model.graph()


@pytest.mark.parametrize(
    "model, machine, relu_first",
    [
        ("residual", "p100:1", True),
        ("residual", "p100:1", False),
        ("residual", "one", True),
        ("inception", "p100:1", True),
        ("input_norm2", "p100:1", False),
        ("input_norm4", "one", False),
    ],
)
def test_the_c_step_of_a_batch_norm_network_computes_the_op_by_op_step(
    model, machine, relu_first, loop_pools
):
    """Each point's C step, its batch norms summing their statistics with the others' through
    the exchange, computes the op-by-op step's gradients, loss and running statistics; and on
    one device (no exchange) likewise."""
    from flexflow.runtime.statistics_exchange import StatisticsExchange

    builders = {
        "residual": lambda: _residual(relu_first),
        "inception": _inception,
        "input_norm2": lambda: _normalized_input(2),
        "input_norm4": lambda: _normalized_input(4),
    }
    graph = builders[model]()
    tasks = _points_one(graph) if machine == "one" else _points(graph, machine)
    points = len(tasks)
    made = program(tasks[0])
    assert made is not None, why_not(tasks[0])
    kinds = [op.kind for op in made.ops]
    if model == "residual":
        assert kinds.count(lib.FF_STEP_BATCH_NORM) == 4 and kinds.count(lib.FF_STEP_CONV) == 4
        assert any(op.step.windows for op in made.ops)  # the projection, read whole
    elif model == "inception":
        assert kinds.count(lib.FF_STEP_BATCH_NORM) == 3 and lib.FF_STEP_CONCAT in kinds
    else:
        assert kinds[0] == lib.FF_STEP_BATCH_NORM
    rng = np.random.default_rng(7)
    arrays = []
    for task in tasks:
        values, grads = _arrays(task, rng)
        for slot in task.forward.states:  # running (mean, variance): a variance above 0
            values[slot] = np.abs(values[slot]).astype(np.float64)
        labels = rng.integers(0, CLASSES, task.tiles[-1][0][1] - task.tiles[-1][0][0])
        arrays.append((values, grads, labels))
    samples = 8 // points

    def c_step(point):
        task, (values, grads, labels) = tasks[point], arrays[point]
        step = native_step(task, None, exchange)
        running = [
            (values[slot].reshape(2, -1), np.full((2, values[slot].size // 2), np.nan))
            for _, slot in step.norms
        ]
        sums = np.zeros(2)
        step.run(blas.sgemm_address(), values, grads, labels, sums, 8, samples, 1, running)
        return grads, sums, [into for _, into in running]

    def op_by_op(point):
        task, (values, _, labels) = tasks[point], arrays[point]
        tiles = CpuTiles(reference_exchange, point)
        grads = {s: np.full_like(a, np.nan) for s, a in arrays[point][1].items()}
        states = {s: np.full_like(values[s], np.nan) for s in task.forward.states}
        sums = np.zeros(2)

        def loss_into(op, index, loss_args, prediction, stored, grad, row):
            value, gradient, correct = loss_tile(loss_args[0], prediction, stored, 8, samples)
            row[...] = (value, correct)
            return np.asarray(gradient, dtype=np.float32)

        inputs = [values[s] for s in task.forward.inputs] + [labels]
        outputs = [sums, *states.values(), *(grads[s] for s in task.backward.overwrites)]
        run_fused_task(
            task, tiles, "step", (inputs, outputs, []), (1, 1, SPARSE_CROSSENTROPY, 8, samples, -1),
            None, (Pass.FORWARD, Pass.LOSS, Pass.BACKWARD), lambda a: a, loss_into,
        )  # fmt: skip
        return grads, sums, [states[slot].reshape(2, -1) for slot in task.forward.states]

    exchange = StatisticsExchange(points) if points > 1 else None
    reference_exchange = StatisticsExchange(points) if points > 1 else None
    got = _concurrently(c_step, points)
    want = _concurrently(op_by_op, points)
    for (grads, sums, running), (want_grads, want_sums, want_running) in zip(
        got, want, strict=True
    ):
        assert set(grads) == set(want_grads)
        for slot, value in grads.items():
            np.testing.assert_allclose(value, want_grads[slot], rtol=2e-5, atol=2e-6)
        assert sums[0] == pytest.approx(want_sums[0], rel=1e-6)
        assert sums[1] == want_sums[1]
        for value, expected in zip(running, want_running, strict=True):
            np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)


def _points_one(graph):
    """The one-device strategy's step task: every batch norm on its tile's own statistics."""
    from flexflow.strategy import ParallelConfig, Strategy

    strategy = Strategy(
        tuple(n.name for n in graph.ops),
        tuple(ParallelConfig((1,) * len(n.sig.output_shape), (0,)) for n in graph.ops),
    )
    regions = [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]
    (group,) = fuse(graph, strategy, regions, frozenset({0}))
    sole = sole_gradients(graph, strategy, regions, (group,))
    return [fused_task(graph, group, 0, [regions[op][0] for op in group.ops], sole)]


def _evaluated_op_by_op(task, values, labels, total, valid):
    """An evaluation batch's forward and loss as the CPU task body runs them without the C
    program: (the output tile, the loss gradient, the loss row)."""

    def loss_into(op, index, loss_args, prediction, stored, grad, row):
        value, gradient, correct = loss_tile(loss_args[0], prediction, stored, total, valid)
        row[...] = (value, correct)
        grad[...] = gradient
        return grad

    outputs = {
        slot: np.full(
            tuple(b - a for a, b in slot.region),
            np.nan,
            np.float64 if slot.kind is SlotKind.RUNNING else np.float32,
        )
        for slot in task.forward.outputs
    }
    grad = np.full_like(outputs[task.output_slot], np.nan)
    sums = np.zeros(2)
    inputs = [values[s] for s in task.forward.inputs] + [labels]
    run_fused_task(
        task, CpuTiles(), "forward+loss", (inputs, [*outputs.values(), grad, sums], []),
        (0, 1, SPARSE_CROSSENTROPY, total, valid, -1), None,
        (Pass.FORWARD, Pass.LOSS, Pass.BACKWARD), lambda a: a, loss_into,
    )  # fmt: skip
    return outputs[task.output_slot], grad, sums


@pytest.mark.parametrize(
    "model",
    ["classifier", "cnn", "residual", "inception", "language_model", "translator", "transformer"],
)
@pytest.mark.parametrize("index, padding", [(0, 0), (1, 1), (1, 2)])  # 2: all padding
def test_the_c_evaluation_computes_the_op_by_op_forward_and_loss(model, index, padding):
    """Outside training (`NativeStep.evaluate`): dropouts pass their input on and batch norms
    normalize with their running statistics, as the op-by-op forward does; the output, the
    loss and the correct count are the op-by-op ones, and the call writes no running
    statistics."""
    graph = {
        "classifier": lambda: _classifier((8, 3, 6)),
        "cnn": lambda: _cnn(padded=True),  # dropouts
        "residual": _residual,
        "inception": _inception,
        "language_model": lambda: _rnn("language_model"),
        "translator": lambda: _rnn("translator"),
        "transformer": lambda: _encoder("transformer"),  # dropouts, attention, layer norms
    }[model]()
    if model in ("residual", "inception"):  # batch norms exchanging statistics in training
        from flexflow.runtime.statistics_exchange import StatisticsExchange

        task = _points(graph, "p100:1")[index]
        step = native_step(task, None, StatisticsExchange(4))
    else:
        task = _task(graph, "p100:1", index)  # 2 of the 8 samples
        step = native_step(task)
    assert step is not None, why_not(task)
    rng = np.random.default_rng(index)
    tokens = not graph.input_tensors[0].spec.dtype.is_float
    values, _ = (_rnn_arrays if tokens else _arrays)(task, rng)
    for _, slot in step.norms:  # running (mean, variance): a variance above 0
        values[slot] = np.abs(values[slot]).astype(np.float64)
    if model in ("residual", "inception"):
        assert step.norms
    prediction_shape = tuple(b - a for a, b in task.output_slot.region)
    labels = rng.integers(0, CLASSES, prediction_shape[:-1])
    per_sample = int(np.prod(prediction_shape[1:-1], dtype=int))
    total, valid = 8 * per_sample, 2 - padding
    running = [values[slot].reshape(2, -1) for _, slot in step.norms]
    before = [r.copy() for r in running]
    sums = np.zeros(2)
    got, grad = step.evaluate(blas.sgemm_address(), values, labels, sums, total, valid, running)
    want, want_grad, want_sums = _evaluated_op_by_op(task, values, labels, total, valid)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    assert sums[0] == pytest.approx(want_sums[0], rel=1e-6)
    assert sums[1] == want_sums[1]
    for now, then in zip(running, before, strict=True):
        np.testing.assert_array_equal(now, then)
