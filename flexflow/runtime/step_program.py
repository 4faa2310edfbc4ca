"""Which step tasks run as one C call (native/step.c), and the program of ops they run.

A step task runs as one call when its whole training step has C kernels: each model input
(at most FF_STEP_MAX_INPUTS) is read once, by an embedding of int32 token ids or by the first
op, every other tensor is made and read inside the task (`FusedGroup.internal`), every op is a
dense layer (relu or none), a convolution (one group, relu or none) or a pooling over whole
images, a flat or a reshape (read in place), a dropout over whole samples, an LSTM step, an
embedding (no aggregation), a stack or concatenation, multi-head attention (no dropout), an
activation of its own, an element-wise add, subtract or multiply, a layer norm, a batch norm
in training (on its tile's statistics, or the batch's through the exchange of the step's
concurrent launch), a split in two, a mean over adjacent axes, or the last op, a softmax
under sparse categorical
cross-entropy, all float32, and every weight gradient is written whole by the task (data
parallelism, or one device). The MLP's and LeNet's steps, AlexNet's, ResNets' and
Inception-v3's, whole unrolled RNNs (an RNN language model or text classifier), the
encoder-decoder NMT and the transformer encoder qualify; any other step runs op by op
(flexflow.fused_run).

The program also fixes how each gradient is summed, in the op-by-op step's order (the
backward in reverse op order, an op's inputs in order): a tensor's first reader to run its
backward writes its gradient, later ones add theirs; a weight shared by several ops (an
unrolled layer's steps) likewise; a tensor read in parts (a time step of a sequence) starts
from zeros, each reader adding its part; a tensor nothing reads has a zero gradient.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from flexflow._kernels import lib
from flexflow.fusion import FusedTask, OpStep, Slot, SlotKind
from flexflow.ops.activations import ActiMode
from flexflow.ops.base import region_shape
from flexflow.ops.batch_norm import RUNNING_MOMENTUM, BatchNorm
from flexflow.ops.concat import Concat
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.dense import Dense
from flexflow.ops.dropout import Dropout
from flexflow.ops.element_binary import BinaryOp, ElementBinary
from flexflow.ops.element_unary import ElementUnary
from flexflow.ops.embedding import AggrMode, Embedding
from flexflow.ops.flat import Flat
from flexflow.ops.layer_norm import LayerNorm
from flexflow.ops.lstm import GATES, LSTM
from flexflow.ops.mean import Mean
from flexflow.ops.multihead_attention import MultiHeadAttention
from flexflow.ops.native_gemm import ACTIVATION_CODES
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.reshape import Reshape
from flexflow.ops.softmax import Softmax
from flexflow.ops.split import Split
from flexflow.ops.stack import Stack

CONV_ACTIVATIONS = (ActiMode.AC_MODE_NONE, ActiMode.AC_MODE_RELU)
"""The activations the C step's convolution applies (a dense layer takes every one)."""
BINARY_CODES = {
    BinaryOp.ADD: lib.FF_BINARY_ADD,
    BinaryOp.SUBTRACT: lib.FF_BINARY_SUBTRACT,
    BinaryOp.MULTIPLY: lib.FF_BINARY_MULTIPLY,
}

WRITE, ADD, PART = 0, 1, 2
"""How an op's backward passes an input's gradient on (`ProgramOp.grads`): written (the
tensor's first reader in the backward), added to what is there, or added into its part of a
gradient that starts from zeros (a time step of a sequence)."""


@dataclass(frozen=True, slots=True)
class ProgramOp:
    """One op of the program as native/kernels.h's ff_step_op describes it."""

    kind: int
    act: int
    """The FF_ACT_* code of a dense layer's or a convolution's activation."""
    dims: tuple[int, int, int, int]
    """(m, n, k, p): per kind, as native/kernels.h says."""
    step: OpStep
    reads: tuple[int, ...]
    """Per input, the tensor it reads (a flat's reader reads the model input)."""
    ldx: int = 0
    """LSTM: floats between the rows of its input."""
    offset: int = 0
    """LSTM reading a time step of a sequence: floats into the sequence where it starts."""
    grads: tuple[int | None, ...] = ()
    """Per input, WRITE, ADD or PART, or None: no gradient (the model input)."""
    weight_adds: tuple[bool, ...] = ()
    """Per weight, whether its gradient is added to an earlier op's (a shared weight)."""
    zeroes: int | None = None
    """The tensor whose gradient the op zeroes before its backward (read in parts)."""
    attention: tuple[int, ...] = ()
    """Multi-head attention: ff_attention_dims (n, lq, lk, eq, ek, ev, e, heads)."""
    window: tuple[int, ...] = ()
    """A convolution or pooling: ff_window_dims (n, c, h, w, o, oh, ow, kh, kw, sh, sw, ph,
    pw, is_max)."""
    dropout: tuple[float, int, int] = (0.0, 0, 0)
    """Dropout: its rate, its seed mod 2**63 and its tile's first element's index in the
    whole tensor."""
    eps: float = 0.0
    """Layer norm: its epsilon."""
    part_floats: tuple[int, ...] = ()
    """Concat: the floats each input adds to a row of the output."""
    count: float = 0.0
    """Batch norm: the elements per channel of the whole batch its statistics span."""
    momentum: float = 0.0
    """Batch norm: its running statistics' momentum."""


@dataclass(frozen=True, slots=True)
class Program:
    ops: tuple[ProgramOp, ...]
    inputs: tuple[tuple[Slot, int], ...]
    """Each model input's slot (in the task's layout order) and the op reading it."""

    @property
    def reads_running(self) -> bool:
        """Whether it has a batch norm, which reads and writes running statistics (stores the
        C++ task bodies do not take)."""
        return any(op.kind == lib.FF_STEP_BATCH_NORM for op in self.ops)

    def dtype(self, which: int) -> np.dtype:
        """The element type model input `which` is read in: an embedding's int32 ids, else
        float32."""
        reader = self.ops[self.inputs[which][1]]
        return np.dtype(np.int32 if reader.kind == lib.FF_STEP_EMBEDDING else np.float32)


def _shape(slot: Slot) -> tuple[int, ...]:
    return region_shape(slot.region)


def _rows(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64))


def _float32(step: OpStep, skip_input: bool = False) -> bool:
    sig = step.node.sig
    specs = (*sig.outputs, *(sig.inputs[1:] if skip_input else sig.inputs))
    return all(spec.dtype.value == "float32" for spec in specs)


def _lstm_input(step: OpStep, x_shape: tuple[int, ...]) -> tuple[int, int] | None:
    """(ldx, offset) of an LSTM step's input in its buffer, or None for a read the C step
    does not take: a time step cut from a sequence made in the task (a window), else the
    whole (n, E) tile, or an (n, 1, E) one."""
    window = step.windows[0] if step.windows else None
    if step.windows and any(w is not None for w in step.windows[1:]):
        return None  # the state is read whole
    features = x_shape[-1]
    if window is None:
        return features, 0
    where, producer = window
    whole = _shape(producer)
    if len(whole) != 3 or len(where) != 3:
        return None
    rows, times, columns = where
    if (rows.start, rows.stop) != (0, whole[0]) or (columns.start, columns.stop) != (0, whole[2]):
        return None
    if times.stop - times.start != 1:
        return None
    return whole[1] * whole[2], times.start * whole[2]


def _op(step: OpStep, last: bool, reads: tuple[int, ...]) -> ProgramOp | None:
    """The step as a program op, or None when the C step has no kernel for it."""
    op = step.node.op
    y_shape = _shape(step.outputs[0][2])
    x_shape = _shape(step.inputs[0][1]) if step.inputs else ()
    if step.windows and isinstance(op, (Conv2D, Pool2D)) and not last:
        x_shape = _strided_whole(step, x_shape)  # reads its producer's images whole
        return None if x_shape is None else _window_op(step, op, reads, x_shape, y_shape)
    if step.windows and not isinstance(op, LSTM):
        return None
    if isinstance(op, Embedding):
        table = _shape(step.weights[0])
        if op.aggr is not AggrMode.AGGR_MODE_NONE or not _float32(step, True):
            return None
        if step.node.sig.inputs[0].dtype.value != "int32" or table != (
            op.num_embeddings,
            op.embedding_dim,
        ):
            return None
        dims = (int(np.prod(x_shape, dtype=np.int64)), table[1], table[0], 0)
        return ProgramOp(lib.FF_STEP_EMBEDDING, 0, dims, step, reads)
    if not _float32(step):
        return None
    if isinstance(op, Dense) and not last:
        dims = (_rows(y_shape), y_shape[-1], x_shape[-1], 0)
        return ProgramOp(lib.FF_STEP_DENSE, ACTIVATION_CODES[op.activation], dims, step, reads)
    if isinstance(op, Softmax) and last and op.axis % len(y_shape) == len(y_shape) - 1:
        return ProgramOp(lib.FF_STEP_SOFTMAX, 0, (_rows(y_shape), y_shape[-1], 0, 0), step, reads)
    if isinstance(op, LSTM) and not last:
        read = _lstm_input(step, x_shape)
        w_ih, w_hh = _shape(step.weights[0]), _shape(step.weights[1])
        if read is None or w_ih[0] != GATES or w_ih[1] != y_shape[1]:
            return None
        dims = (y_shape[0], y_shape[1], x_shape[-1], w_hh[2])
        return ProgramOp(lib.FF_STEP_LSTM, 0, dims, step, reads, *read)
    if isinstance(op, MultiHeadAttention) and not last and op.dropout == 0:
        (n, lq, eq), (_, lk, ek), (_, _, ev) = (_shape(slot) for _, slot in step.inputs)
        if y_shape != (n, lq, op.embed_dim):
            return None
        dims = (n, lq, lk, eq, ek, ev, op.embed_dim, op.num_heads)
        return ProgramOp(lib.FF_STEP_ATTENTION, 0, (0, 0, 0, 0), step, reads, attention=dims)
    if isinstance(op, Dropout) and not last:
        return _dropout_op(step, op, reads, y_shape)
    if isinstance(op, (Conv2D, Pool2D)) and not last:
        return _window_op(step, op, reads, x_shape, y_shape)
    if isinstance(op, (ElementUnary, ElementBinary, LayerNorm, Split, Mean, Concat)) and not last:
        return _elementwise_op(step, op, reads, x_shape, y_shape)
    if isinstance(op, BatchNorm) and not last:
        return _batch_norm_op(step, op, reads, x_shape)
    if isinstance(op, Stack) and not last:
        axis = op.axis % len(y_shape)
        part = y_shape[:axis] + y_shape[axis + 1 :]
        if any(_shape(slot) != part for _, slot in step.inputs):
            return None
        outer = int(np.prod(part[:axis], dtype=np.int64))
        return ProgramOp(
            lib.FF_STEP_STACK, 0, (outer, int(np.prod(part[axis:])), 0, 0), step, reads
        )
    return None


def _elementwise_op(step: OpStep, op, reads, x_shape, y_shape) -> ProgramOp | None:
    """An activation of its own, an element-wise binary op, a layer norm, a split in two, a mean
    over adjacent axes or a concatenation, on any tile (each reads its inputs' tiles whole)."""
    if isinstance(op, ElementUnary):
        if op.function is not None:
            return None  # exp, pow, ...: native/step.c computes activations only
        elements = int(np.prod(y_shape, dtype=np.int64))
        code = ACTIVATION_CODES[op.activation]
        return ProgramOp(lib.FF_STEP_UNARY, code, (elements, 0, 0, 0), step, reads)
    if isinstance(op, ElementBinary):
        if op.op_type not in BINARY_CODES:
            return None  # divide, max, min: not among native/step.c's binary ops
        if any(spec.shape != step.node.sig.output_shape for spec in step.node.sig.inputs):
            return None  # broadcasting: native/step.c's binary op takes operands of one shape
        elements = int(np.prod(y_shape, dtype=np.int64))
        return ProgramOp(lib.FF_STEP_BINARY, 0, (elements, 0, 0, BINARY_CODES[op.op_type]), step,
                         reads)  # fmt: skip
    if isinstance(op, LayerNorm):
        width = int(np.prod(y_shape[len(y_shape) - len(op.axes) :], dtype=np.int64))
        rows = int(np.prod(y_shape, dtype=np.int64)) // width
        return ProgramOp(lib.FF_STEP_LAYER_NORM, 0, (rows, width, 0, 0), step, reads, eps=op.eps)
    if isinstance(op, Split) and len(op.sizes) == 2:
        axis = op.axis % len(x_shape)
        outer = int(np.prod(x_shape[:axis], dtype=np.int64))
        inner = int(np.prod(x_shape[axis + 1 :], dtype=np.int64))
        return ProgramOp(lib.FF_STEP_SPLIT, 0, (outer, inner, *op.sizes), step, reads)
    if isinstance(op, Mean):
        reduced = op.reduced_axes(x_shape)
        if reduced != tuple(range(reduced[0], reduced[-1] + 1)):
            return None  # averaged over axes that are not adjacent
        outer = int(np.prod(x_shape[: reduced[0]], dtype=np.int64))
        count = int(np.prod(x_shape[reduced[0] : reduced[-1] + 1], dtype=np.int64))
        inner = int(np.prod(x_shape[reduced[-1] + 1 :], dtype=np.int64))
        return ProgramOp(lib.FF_STEP_MEAN, 0, (outer, inner, count, 0), step, reads)
    if isinstance(op, Concat):
        axis = op.axis % len(y_shape)
        shapes = [_shape(slot) for _, slot in step.inputs]
        if any(s[:axis] + s[axis + 1 :] != y_shape[:axis] + y_shape[axis + 1 :] for s in shapes):
            return None
        outer = int(np.prod(y_shape[:axis], dtype=np.int64))
        floats = tuple(int(np.prod(s[axis:], dtype=np.int64)) for s in shapes)
        return ProgramOp(lib.FF_STEP_CONCAT, 0, (outer, 0, 0, 0), step, reads, part_floats=floats)
    return None


def _strided_whole(step: OpStep, x_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The producer's tile a strided convolution or pooling reads all but the last rows or
    columns of (a 1x1 convolution at stride 2 of an even image skips them), or None for another
    window: read whole, the op computes the same output, and its input's gradient is zero in
    those rows."""
    if any(w is not None for w in step.windows[1:]):
        return None
    where, producer = step.windows[0]
    whole = _shape(producer)
    if len(whole) != 4 or len(where) != 4:
        return None
    starts = tuple(part.start for part in where)
    if starts != (0,) * 4 or x_shape[:2] != whole[:2]:
        return None
    return whole


def _window_op(step: OpStep, op, reads, x_shape, y_shape) -> ProgramOp | None:
    """A convolution (one group, relu or none) or a pooling (no activation) over whole
    images: the tile holds every row and column, so its padding is the op's (and an average
    pooling's divisor, its window's cells inside the tile, the whole image's)."""
    if len(x_shape) != 4 or x_shape[2:] != step.node.sig.inputs[0].shape[2:]:
        return None
    n, c, h, w = x_shape
    o, oh, ow = y_shape[1:]
    dims = (n, c, h, w, o, oh, ow, *op._kernel, *op._stride, *op._padding)
    if isinstance(op, Conv2D):
        if op.groups != 1 or op.activation not in CONV_ACTIVATIONS:
            return None
        if _shape(step.weights[0])[1] != c:
            return None
        return ProgramOp(lib.FF_STEP_CONV, ACTIVATION_CODES[op.activation], (0,) * 4, step, reads,
                         window=(*dims, 0))  # fmt: skip
    if op.activation is not ActiMode.AC_MODE_NONE:
        return None
    is_max = int(op.pool_type is PoolType.POOL_MAX)
    return ProgramOp(lib.FF_STEP_POOL, 0, (0,) * 4, step, reads, window=(*dims, is_max))


def _batch_norm_op(step: OpStep, op: BatchNorm, reads, x_shape) -> ProgramOp | None:
    """A batch norm in training on its tile's own statistics, or on the batch's where the
    tile's samples exchange theirs with the other points of a concurrent launch."""
    if step.running is None:
        return None  # its tasks share statistics through stores: it runs alone
    if x_shape[0] != step.node.sig.inputs[0].shape[0] and not step.exchange:
        return None
    hw = int(np.prod(x_shape[2:], dtype=np.int64))
    act = lib.FF_ACT_RELU if op.relu else lib.FF_ACT_NONE
    return ProgramOp(lib.FF_STEP_BATCH_NORM, act, (x_shape[0], x_shape[1], hw, 0), step, reads,
                     eps=op.eps, count=float(op.batch_count(step.node.sig)),
                     momentum=RUNNING_MOMENTUM)  # fmt: skip


def _dropout_op(step: OpStep, op: Dropout, reads, y_shape) -> ProgramOp | None:
    """Dropout over a tile of whole samples: its elements follow on from its first one's index
    in the whole tensor, which draws its mask (flexflow.ops.dropout.dropout_mask)."""
    whole = step.node.sig.outputs[0].shape
    if y_shape[1:] != whole[1:]:
        return None
    elements = int(np.prod(y_shape, dtype=np.int64))
    base = step.region[0][0] * int(np.prod(whole[1:], dtype=np.int64))
    return ProgramOp(lib.FF_STEP_DROPOUT, 0, (elements, 0, 0, 0), step, reads,
                     dropout=(op.rate, op.seed % 2**63, base))  # fmt: skip


def program(task: FusedTask) -> Program | None:
    """The step task's program, or None when it does not run as one C call (module doc)."""
    made = _program(task)
    return made if isinstance(made, Program) else None


def why_not(task: FusedTask) -> str | None:
    """Why the step task does not run as one C call, for a run's log; None when it does."""
    made = _program(task)
    return None if isinstance(made, Program) else made


def _program(task: FusedTask) -> Program | str:
    """The program, or the reason there is none."""
    backward, forward = task.backward, task.forward
    if backward.reductions or backward.accumulators:
        return "its weight gradients are summed with other tasks' (not data parallelism)"
    if not task.step_ready:
        return "its backward reads outputs the step task does not keep"
    kinds = (SlotKind.TENSOR, SlotKind.WEIGHT, SlotKind.RUNNING)
    if any(slot.kind not in kinds for slot in forward.inputs):
        return "it reads a store the C step does not take"
    slots = {slot.id: slot for slot in forward.inputs if slot.kind is SlotKind.TENSOR}
    internal = task.group.internal
    alias: dict[int, int] = {}  # a flat's output: its readers read its input's buffer
    readers: dict[int, int] = {}  # model input -> the op reading it
    ops: list[ProgramOp] = []
    for position, step in enumerate(task.steps):
        last = position == len(task.steps) - 1
        node = step.node
        if _reads_in_place(step) and not last:
            source = alias.get(step.inputs[0][0], step.inputs[0][0])
            if source not in slots and source not in internal:
                return f"{node.kind} '{node.name}' reads a tensor made outside the task"
            alias[step.outputs[0][0]] = source  # the same buffer, read as rows
            continue
        reads = tuple(alias.get(t, t) for t, _ in step.inputs)
        for i, tensor in enumerate(reads):
            if tensor in slots:  # read once, as input 0 of the first op or of an embedding
                first_or_embedding = not ops or isinstance(node.op, Embedding)
                if i or tensor in readers or not first_or_embedding:
                    return (
                        f"{node.kind} '{node.name}' reads a model input the C step cannot pass it"
                    )
                readers[tensor] = len(ops)
            elif tensor not in internal:
                return f"{node.kind} '{node.name}' reads a tensor made outside the task"
        found = _op(step, last, reads)
        if found is None:
            return f"the C step has no kernel for {node.kind} '{node.name}' as configured"
        ops.append(found)
    if not ops or set(readers) != set(slots):
        return "its model inputs are not read as the C step reads them"
    if len(slots) > lib.FF_STEP_MAX_INPUTS:
        return f"it reads {len(slots)} model inputs, more than {lib.FF_STEP_MAX_INPUTS}"
    planned = _plan_gradients(ops, frozenset(slots))
    if planned is None:
        return "a tensor is read both whole and by time steps"
    return Program(planned, tuple((slots[t], readers[t]) for t in slots))


def _reads_in_place(step: OpStep) -> bool:
    """A flat, or a reshape of whole samples: its output is its input's buffer, read as
    another shape."""
    if step.windows or not isinstance(step.node.op, (Flat, Reshape)):
        return False
    sig = step.node.sig
    tiles = (_shape(step.inputs[0][1]), _shape(step.outputs[0][2]))
    whole = (sig.inputs[0].shape, sig.outputs[0].shape)
    return all(tile[1:] == shape[1:] for tile, shape in zip(tiles, whole, strict=True))


def _plan_gradients(
    ops: list[ProgramOp], model_inputs: frozenset[int]
) -> tuple[ProgramOp, ...] | None:
    """`ops` with how each passes its gradients on (module doc), or None where a tensor is
    read both whole and in parts."""
    parts = {op.reads[0] for op in ops if op.kind == lib.FF_STEP_LSTM and op.step.windows}
    if any(
        t in parts
        for op in ops
        for i, t in enumerate(op.reads)
        if not (i == 0 and op.kind == lib.FF_STEP_LSTM and op.step.windows)
    ):
        return None
    written: set[int] = set()
    weights: set[Slot] = set()
    planned: list[ProgramOp] = []
    for op in reversed(ops):
        grads: list[int | None] = []
        zeroes = None
        for i, tensor in enumerate(op.reads):
            if tensor in model_inputs:
                grads.append(None)
            elif i == 0 and tensor in parts:
                if tensor not in written:
                    zeroes = tensor
                grads.append(PART)
            else:
                grads.append(ADD if tensor in written else WRITE)
            written.add(tensor)
        adds = []
        for slot in op.step.weight_grads:
            adds.append(slot in weights)
            weights.add(slot)
        planned.append(replace(op, grads=tuple(grads), weight_adds=tuple(adds), zeroes=zeroes))
    return tuple(reversed(planned))
