"""The layer API (FlexFlow's FFModel methods): each call adds one op (LSTMs one op per time
step) to an operator graph and infers its output at once.

Shapes follow FlexFlow: images are NCHW `(sample, channel, height, width)`, sequences are
`(sample, length, channel)`. A wrong input raises `ShapeError` from the op, naming the layer, and
leaves the graph as it was (`_one_layer`).

Recurrent layers are unrolled per time step as in the paper (§8.1): `lstm` adds one `lstm` op
per step, all sharing one set of weights. It returns a `(sample, length, hidden)` tensor whose
producer (a `stack` of the steps' outputs) is only added to the graph when a non-recurrent layer
reads it; a following `lstm` reads the steps' outputs directly, so layer l at step t waits only
for step t of layer l-1, not for the whole sequence, which is the wavefront parallelism that
model-parallel RNN strategies exploit.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from flexflow.errors import GraphError, NotOfferedError, ShapeError
from flexflow.flexflow_arguments import flexflow_only as _flexflow_only
from flexflow.graph import GraphTensor, OperatorGraph, OpNode, Parameter
from flexflow.ops import ActiMode, DType, Op, TensorSpec
from flexflow.ops.base import is_int, python_scalars
from flexflow.ops.batch_matmul import BatchMatmul
from flexflow.ops.batch_norm import BatchNorm
from flexflow.ops.concat import Concat
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.dense import Dense
from flexflow.ops.dropout import Dropout
from flexflow.ops.element_binary import BinaryOp, ElementBinary
from flexflow.ops.element_unary import ElementUnary
from flexflow.ops.embedding import AggrMode, Embedding
from flexflow.ops.flat import Flat
from flexflow.ops.layer_norm import LayerNorm
from flexflow.ops.lstm import LSTM
from flexflow.ops.mean import Mean
from flexflow.ops.multihead_attention import MultiHeadAttention
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.reduce_sum import ReduceSum
from flexflow.ops.reshape import Reshape
from flexflow.ops.softmax import Softmax
from flexflow.ops.split import Split
from flexflow.ops.stack import Stack
from flexflow.ops.transpose import Transpose
from flexflow.ops.unary_functions import UnaryFunction

_FLEXFLOW_TENSOR_ACCESS = frozenset(
    ("set_tensor", "get_tensor", "attach_numpy_array", "detach_numpy_array", "inline_map",
     "inline_unmap", "get_array", "get_flat_array", "is_mapped")
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Tensor:
    """A handle to a tensor of an FFModel; `dims` is FlexFlow's name for the shape."""

    id: int
    shape: tuple[int, ...]
    dtype: DType = DType.FLOAT32
    model: int = 0  # id() of the FFModel that made it, so a tensor cannot cross models

    @property
    def dims(self) -> tuple[int, ...]:
        return self.shape

    def __getattr__(self, name: str):
        if name in _FLEXFLOW_TENSOR_ACCESS:  # FlexFlow scripts read and write tensors so
            raise NotOfferedError(
                f"Tensor.{name} (FlexFlow's access to a tensor's data) is not offered here: "
                "pass arrays to fit, eval and predict, and read weights with "
                "model.executor.get_weights() (flexflow.core's FFModel sets and reads the "
                "batches of a hand-written loop: set_tensor, get_array)."
            )
        raise AttributeError(f"'Tensor' object has no attribute '{name}'")

    @property
    def num_dims(self) -> int:
        return len(self.shape)


class LayerAPI:
    """Builds an operator graph layer by layer; `graph()` returns it as an immutable value.
    FFModel adds compiling and training to it."""

    def __init__(self) -> None:
        self._tensors: dict[int, GraphTensor] = {}
        self._ops: list[OpNode] = []
        self._params: list[Parameter] = []
        self._counters: dict[str, int] = {}
        self._names: dict[str, str] = {}  # op name -> why it is taken, for errors
        self._next_tensor = 0
        # Sequence outputs of `lstm` not materialized yet: tensor id -> the steps' outputs.
        self._sequences: dict[int, tuple[Tensor, ...]] = {}
        self._read: set[int] = set()

    @property
    def _compiled(self) -> bool:
        """Whether the graph is final (FFModel: compiled); a layer added then is refused."""
        return False

    # ---- plumbing -----------------------------------------------------------------------------
    def _layer_name(self, kind: str, name: str | None) -> str:
        if name is None:
            while True:
                self._counters[kind] = self._counters.get(kind, 0) + 1
                name = f"{kind}_{self._counters[kind]}"
                if name not in self._names:
                    break
        elif not isinstance(name, str) or not name:
            raise GraphError(f"{kind}: layer name must be a non-empty string, got {name!r}.")
        elif name in self._names:
            raise GraphError(f"{kind} '{name}': {self._names[name]}; choose another name.")
        self._names[name] = "a layer with this name exists"
        return name

    def _step_name(self, layer: str, t: int) -> str:
        """The name of an unrolled layer's op for step `t`, taken for it (`<layer>_t<t>`): a
        user's layer of that name, before or after, is refused (two ops of one name, which the
        graph only found once built, and then at every build)."""
        name = f"{layer}_t{t}"
        if name in self._names:
            raise GraphError(
                f"lstm '{layer}': its step {t} is an op named '{name}', and "
                f"{self._names[name]}; name the lstm or that layer otherwise."
            )
        self._names[name] = f"step {t} of lstm '{layer}' is an op of this name"
        return name

    def _new_tensor_id(self) -> int:
        self._next_tensor += 1
        return self._next_tensor - 1

    def _spec(self, kind: str, name: str, tensor: Tensor) -> TensorSpec:
        ours = isinstance(tensor, Tensor) and tensor.model == id(self)
        if not ours or (tensor.id not in self._tensors and tensor.id not in self._sequences):
            raise ShapeError(
                f"{kind} '{name}': input {tensor!r} is not a tensor of this model; pass a tensor "
                "returned by create_tensor or by a layer of the same FFModel."
            )
        self._materialize(tensor)
        return self._tensors[tensor.id].spec

    def _add(
        self,
        op: Op,
        inputs: Sequence[Tensor],
        name: str,
        shared_weights: tuple[int, ...] | None = None,
        layer: str | None = None,
    ) -> tuple[Tensor, ...]:
        """Infer `op` on `inputs` and append it as part of `layer` (default: its own name).

        Its weights are new (named `<layer>.<weight>`) unless `shared_weights` gives the ids of
        existing parameters to reuse.
        """
        if self._compiled:
            raise GraphError(
                f"{op.kind} '{name}': the model is compiled; add layers before compile()."
            )
        layer = layer or name
        op = python_scalars(op)
        specs = tuple(self._spec(op.kind, name, t) for t in inputs)
        sig = op.infer(name, specs)
        op_id = len(self._ops)
        outputs = []
        for index, spec in enumerate(sig.outputs):
            tid = self._new_tensor_id()
            self._tensors[tid] = GraphTensor(tid, f"{name}:{index}", spec, op_id, index)
            outputs.append(self._handle(tid, spec.shape, spec.dtype))
        if shared_weights is None:
            weights = []
            for wspec in sig.weights:
                pid = len(self._params)
                self._params.append(Parameter(pid, f"{layer}.{wspec.name}", wspec))
                weights.append(pid)
            shared_weights = tuple(weights)
        self._read.update(t.id for t in inputs)
        self._ops.append(
            OpNode(
                op_id,
                name,
                op,
                tuple(t.id for t in inputs),
                tuple(o.id for o in outputs),
                shared_weights,
                sig,
                layer,
            )
        )
        return tuple(outputs)

    def _handle(self, tid: int, shape: tuple[int, ...], dtype: DType) -> Tensor:
        """The handle of tensor `tid` given to the user (`flexflow.core` gives FlexFlow's)."""
        return Tensor(tid, shape, dtype, id(self))

    def _layer(self, op: Op, inputs: Sequence[Tensor], name: str | None) -> Tensor:
        (out,) = self._add(op, inputs, self._layer_name(op.kind, name))
        return out

    def _materialize(self, tensor: Tensor) -> None:
        """Add the `stack` op producing an LSTM's sequence output, the first time a layer needs it."""
        steps = self._sequences.pop(tensor.id, None)
        if steps is None:
            return
        op = Stack(axis=1)
        name = self._layer_name(op.kind, None)
        specs = tuple(self._tensors[s.id].spec for s in steps)
        sig = op.infer(name, specs)
        op_id = len(self._ops)
        self._tensors[tensor.id] = GraphTensor(tensor.id, f"{name}:0", sig.outputs[0], op_id, 0)
        self._read.update(s.id for s in steps)
        self._ops.append(OpNode(op_id, name, op, tuple(s.id for s in steps), (tensor.id,), (), sig))

    # ---- the graph ----------------------------------------------------------------------------
    @property
    def num_ops(self) -> int:
        """The ops (layers) added so far."""
        return len(self._ops)

    def graph(self) -> OperatorGraph:
        """The operator graph so far. LSTM sequences no layer read become outputs (stacked)."""
        for tid in list(self._sequences):
            if tid not in self._read:
                self._materialize(self._handle(tid, (), DType.FLOAT32))
        return OperatorGraph(
            tuple(self._ops),
            tuple(sorted(self._tensors.values(), key=lambda t: t.id)),
            tuple(self._params),
        )

    # ---- layers -------------------------------------------------------------------------------
    def create_tensor(
        self,
        dims: Sequence[int],
        data_type: DType = DType.FLOAT32,
        create_grad: bool = True,
        name: str | None = None,
    ) -> Tensor:
        """A model input of shape `dims` (sample first); `create_grad` is FlexFlow's (inputs
        take no gradient here)."""
        _flexflow_only("input", name, create_grad=create_grad)
        name = self._layer_name("input", name)
        if isinstance(dims, str) or np.ndim(dims) != 1:  # a tuple, list or 1-D array
            raise ShapeError(
                f"input '{name}': dims must be a sequence of positive integers with the sample "
                f"first (e.g. (batch, features)), got {dims!r}."
            )
        shape = tuple(dims)
        if not shape or any(not is_int(d) or d <= 0 for d in shape):
            raise ShapeError(
                f"input '{name}': dims must be positive integers with the sample first, got {shape}."
            )
        shape = tuple(int(d) for d in shape)  # numpy's integers too: the handle's dims
        try:  # a DType, or its value ("float32")
            dtype = DType(data_type.value if isinstance(data_type, DType) else data_type)
        except ValueError:
            choices = ", ".join(f"DataType.{t.name}" for t in DType)
            raise ShapeError(
                f"input '{name}': data type {data_type!r} is not one flexflow takes; pass one of "
                f"{choices}."
            ) from None
        tid = self._new_tensor_id()
        self._tensors[tid] = GraphTensor(tid, name, TensorSpec(shape, dtype))
        return self._handle(tid, shape, dtype)

    def conv2d(
        self,
        input: Tensor,
        out_channels: int,
        kernel_h: int,
        kernel_w: int,
        stride_h: int,
        stride_w: int,
        padding_h: int,
        padding_w: int,
        activation: ActiMode = ActiMode.AC_MODE_NONE,
        groups: int = 1,
        use_bias: bool = True,
        shared_op: object | None = None,
        kernel_initializer: object | None = None,
        bias_initializer: object | None = None,
        name: str | None = None,
    ) -> Tensor:
        """FlexFlow's conv2d; `shared_op` and the initializers are FlexFlow's (None only)."""
        _flexflow_only(
            "conv2d",
            name,
            shared_op=shared_op,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
        )
        op = Conv2D(
            out_channels,
            kernel_h,
            kernel_w,
            stride_h,
            stride_w,
            padding_h,
            padding_w,
            activation,
            groups,
            use_bias,
        )
        return self._layer(op, [input], name)

    def pool2d(
        self,
        input: Tensor,
        kernel_h: int,
        kernel_w: int,
        stride_h: int,
        stride_w: int,
        padding_h: int,
        padding_w: int,
        pool_type: PoolType = PoolType.POOL_MAX,
        activation: ActiMode = ActiMode.AC_MODE_NONE,
        name: str | None = None,
    ) -> Tensor:
        op = Pool2D(
            kernel_h, kernel_w, stride_h, stride_w, padding_h, padding_w, pool_type, activation
        )
        return self._layer(op, [input], name)

    def dense(
        self,
        input: Tensor,
        out_dim: int,
        activation: ActiMode = ActiMode.AC_MODE_NONE,
        use_bias: bool = True,
        datatype: DType | None = None,
        shared_op: object | None = None,
        kernel_initializer: object | None = None,
        bias_initializer: object | None = None,
        kernel_regularizer: object | None = None,
        name: str | None = None,
    ) -> Tensor:
        """FlexFlow's dense; its arguments after `use_bias` take their defaults only."""
        _flexflow_only(
            "dense",
            name,
            datatype=datatype,
            shared_op=shared_op,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
        )
        return self._layer(Dense(out_dim, activation, use_bias), [input], name)

    def embedding(
        self,
        input: Tensor,
        num_embeddings: int,
        embedding_dim: int,
        aggr: AggrMode = AggrMode.AGGR_MODE_NONE,
        dtype: DType | None = None,
        shared_op: object | None = None,
        kernel_initializer: object | None = None,
        name: str | None = None,
    ) -> Tensor:
        """FlexFlow's embedding; its arguments after `aggr` take their defaults only."""
        _flexflow_only(
            "embedding",
            name,
            dtype=dtype,
            shared_op=shared_op,
            embedding_initializer=kernel_initializer,
        )
        return self._layer(Embedding(num_embeddings, embedding_dim, aggr), [input], name)

    def lstm(
        self,
        input: Tensor,
        hidden_size: int,
        return_sequences: bool = True,
        name: str | None = None,
    ) -> Tensor:
        """One LSTM layer over a `(sample, length, features)` sequence, unrolled into one op per step.

        Returns the hidden states `(sample, length, hidden)`, or with `return_sequences=False`
        the last step's hidden state `(sample, hidden)`.
        """
        layer = self._layer_name("lstm", name)
        steps_in = self._sequences.get(input.id)
        if steps_in is None:
            spec = self._spec("lstm", layer, input)
            if len(spec.shape) != 3:
                raise ShapeError(
                    f"lstm '{layer}': input must be a (sample, length, features) sequence, got "
                    f"shape {spec.shape}; embed token ids first or reshape to rank 3."
                )
            length = spec.shape[1]
        else:
            self._read.add(input.id)
            length = len(steps_in)
        hidden = cell = None
        weights: tuple[int, ...] | None = None
        outputs: list[Tensor] = []
        for t in range(length):
            if steps_in is None:
                x, op = input, LSTM(hidden_size, step=t)  # step t reads its slice of the sequence
            else:
                x, op = steps_in[t], LSTM(hidden_size)
            inputs = [x] if hidden is None else [x, hidden, cell]
            hidden, cell = self._add(op, inputs, self._step_name(layer, t), weights, layer)
            weights = self._ops[-1].weights  # every step shares the first step's weights
            outputs.append(hidden)
        if not return_sequences:
            return outputs[-1]
        sample = outputs[0].shape[0]
        tid = self._new_tensor_id()
        self._sequences[tid] = tuple(outputs)
        return self._handle(tid, (sample, length, int(hidden_size)), DType.FLOAT32)

    def multihead_attention(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        embed_dim: int,
        num_heads: int,
        kdim: int = 0,
        vdim: int = 0,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        data_type: DType | None = None,
        kernel_initializer: object | None = None,
        name: str | None = None,
    ) -> Tensor:
        """FlexFlow's multihead_attention; its arguments after `bias` take their defaults."""
        _flexflow_only(
            "multihead_attention",
            name,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            data_type=data_type,
            kernel_initializer=kernel_initializer,
        )
        op = MultiHeadAttention(embed_dim, num_heads, kdim, vdim, dropout, bias)
        return self._layer(op, [query, key, value], name)

    def batch_matmul(
        self,
        A: Tensor,
        B: Tensor,
        a_seq_length_dim: int | None = None,
        b_seq_length_dim: int | None = None,
        name: str | None = None,
    ) -> Tensor:
        """FlexFlow's batch_matmul; the sequence-length dimensions are its hints (taken,
        unused: every strategy computes the whole product)."""
        _flexflow_only(
            "batch_matmul",
            name,
            a_seq_length_dim=a_seq_length_dim,
            b_seq_length_dim=b_seq_length_dim,
        )
        return self._layer(BatchMatmul(), [A, B], name)

    def concat(self, tensors: Sequence[Tensor], axis: int, name: str | None = None) -> Tensor:
        return self._layer(Concat(axis), list(tensors), name)

    def split(
        self, input: Tensor, sizes: int | Sequence[int], axis: int, name: str | None = None
    ) -> list[Tensor]:
        """Split along `axis` into `sizes` equal parts (an int) or parts of the given sizes."""
        name = self._layer_name("split", name)
        spec = self._spec("split", name, input)
        if is_int(sizes):
            sizes = int(sizes)
            if (
                sizes <= 0
                or not -len(spec.shape) <= axis < len(spec.shape)
                or spec.shape[axis] % sizes
            ):
                raise ShapeError(
                    f"split '{name}': cannot split input {spec.shape} into {sizes} equal parts "
                    f"along axis {axis}; pass part sizes that sum to the axis length."
                )
            sizes = [spec.shape[axis] // sizes] * sizes
        return list(self._add(Split(tuple(sizes), axis), [input], name))

    def flat(self, input: Tensor, name: str | None = None) -> Tensor:
        return self._layer(Flat(), [input], name)

    def reshape(self, input: Tensor, shape: Sequence[int], name: str | None = None) -> Tensor:
        return self._layer(Reshape(tuple(shape)), [input], name)

    def transpose(self, input: Tensor, perm: Sequence[int], name: str | None = None) -> Tensor:
        return self._layer(Transpose(tuple(perm)), [input], name)

    def add(self, x: Tensor, y: Tensor, inplace_a: bool = False, name: str | None = None) -> Tensor:
        _flexflow_only("add", name, inplace_a=inplace_a)
        return self._layer(ElementBinary(BinaryOp.ADD), [x, y], name)

    def subtract(
        self, x: Tensor, y: Tensor, inplace_a: bool = False, name: str | None = None
    ) -> Tensor:
        _flexflow_only("subtract", name, inplace_a=inplace_a)
        return self._layer(ElementBinary(BinaryOp.SUBTRACT), [x, y], name)

    def multiply(
        self, x: Tensor, y: Tensor, inplace_a: bool = False, name: str | None = None
    ) -> Tensor:
        _flexflow_only("multiply", name, inplace_a=inplace_a)
        return self._layer(ElementBinary(BinaryOp.MULTIPLY), [x, y], name)

    def divide(
        self, x: Tensor, y: Tensor, inplace_a: bool = False, name: str | None = None
    ) -> Tensor:
        """x / y element by element (a zero in y gives inf or NaN there, as FlexFlow's)."""
        _flexflow_only("divide", name, inplace_a=inplace_a)
        return self._layer(ElementBinary(BinaryOp.DIVIDE), [x, y], name)

    def max(self, x: Tensor, y: Tensor, inplace_a: bool = False, name: str | None = None) -> Tensor:
        """The larger of x and y element by element; the gradient goes to the one chosen, to
        x where they are equal."""
        _flexflow_only("max", name, inplace_a=inplace_a)
        return self._layer(ElementBinary(BinaryOp.MAX), [x, y], name)

    def min(self, x: Tensor, y: Tensor, inplace_a: bool = False, name: str | None = None) -> Tensor:
        """The smaller of x and y element by element; the gradient goes to the one chosen, to
        x where they are equal."""
        _flexflow_only("min", name, inplace_a=inplace_a)
        return self._layer(ElementBinary(BinaryOp.MIN), [x, y], name)

    def _function(
        self, function: UnaryFunction, x: Tensor, name: str | None, scalar: object = None
    ) -> Tensor:
        """One of FlexFlow's element-wise functions (`flexflow.ops.unary_functions`); the
        op takes a number as a float and refuses anything else."""
        return self._layer(ElementUnary(function=function, scalar=scalar), [x], name)

    def exp(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._function(UnaryFunction.EXP, x, name)

    def sin(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._function(UnaryFunction.SIN, x, name)

    def cos(self, x: Tensor, name: str | None = None) -> Tensor:
        return self._function(UnaryFunction.COS, x, name)

    def pow(self, input: Tensor, exponent: float, name: str | None = None) -> Tensor:
        """input ** exponent element by element (NaN where a negative input meets a
        non-integer exponent, as FlexFlow's powf)."""
        return self._function(UnaryFunction.POW, input, name, exponent)

    def rsqrt(self, input: Tensor, name: str | None = None) -> Tensor:
        """1 / sqrt(input) element by element: inf where the input is 0, NaN below."""
        return self._function(UnaryFunction.RSQRT, input, name)

    def scalar_multiply(
        self, input: Tensor, scalar: float, inplace: bool = True, name: str | None = None
    ) -> Tensor:
        _flexflow_only("scalar_multiply", name, inplace=inplace)
        return self._function(UnaryFunction.SCALAR_MULTIPLY, input, name, scalar)

    def scalar_add(
        self, input: Tensor, scalar: float, inplace: bool = True, name: str | None = None
    ) -> Tensor:
        _flexflow_only("scalar_add", name, inplace=inplace)
        return self._function(UnaryFunction.SCALAR_ADD, input, name, scalar)

    def scalar_sub(
        self, input: Tensor, scalar: float, inplace: bool = True, name: str | None = None
    ) -> Tensor:
        """input - scalar."""
        _flexflow_only("scalar_sub", name, inplace=inplace)
        return self._function(UnaryFunction.SCALAR_SUB, input, name, scalar)

    def scalar_true_divide(
        self, input: Tensor, scalar: float, inplace: bool = True, name: str | None = None
    ) -> Tensor:
        """input / scalar (a scalar of 0 is refused)."""
        _flexflow_only("scalar_true_divide", name, inplace=inplace)
        return self._function(UnaryFunction.SCALAR_TRUE_DIVIDE, input, name, scalar)

    def identity(self, input: Tensor, name: str | None = None) -> Tensor:
        """A copy of input (an element_unary of no activation)."""
        return self._layer(ElementUnary(ActiMode.AC_MODE_NONE), [input], name)

    def relu(self, input: Tensor, inplace: bool = True, name: str | None = None) -> Tensor:
        _flexflow_only("relu", name, inplace=inplace)
        return self._layer(ElementUnary(ActiMode.AC_MODE_RELU), [input], name)

    def sigmoid(self, input: Tensor, name: str | None = None) -> Tensor:
        return self._layer(ElementUnary(ActiMode.AC_MODE_SIGMOID), [input], name)

    def tanh(self, input: Tensor, name: str | None = None) -> Tensor:
        return self._layer(ElementUnary(ActiMode.AC_MODE_TANH), [input], name)

    def gelu(self, input: Tensor, inplace: bool = True, name: str | None = None) -> Tensor:
        _flexflow_only("gelu", name, inplace=inplace)
        return self._layer(ElementUnary(ActiMode.AC_MODE_GELU), [input], name)

    def elu(self, input: Tensor, inplace: bool = True, name: str | None = None) -> Tensor:
        _flexflow_only("elu", name, inplace=inplace)
        return self._layer(ElementUnary(ActiMode.AC_MODE_ELU), [input], name)

    def softmax(self, input: Tensor, axis: int = -1, name: str | None = None) -> Tensor:
        return self._layer(Softmax(axis), [input], name)

    def batch_norm(self, input: Tensor, relu: bool = True, name: str | None = None) -> Tensor:
        return self._layer(BatchNorm(relu), [input], name)

    def layer_norm(
        self,
        input: Tensor,
        axes: Sequence[int] = (-1,),
        elementwise_affine: bool = True,
        eps: float = 1e-5,
        use_bias: bool = True,
        name: str | None = None,
    ) -> Tensor:
        _flexflow_only("layer_norm", name, use_bias=use_bias)
        return self._layer(LayerNorm(tuple(axes), elementwise_affine, eps), [input], name)

    def dropout(
        self, input: Tensor, rate: float, seed: int | None = None, name: str | None = None
    ) -> Tensor:
        """Inverted dropout of `rate` in training (the identity in evaluation). Its masks come
        from `seed` (default: one drawn from the layer's name, so two dropouts of one model
        never drop the same elements), the iteration and the run's FFConfig.seed, and do not
        depend on the strategy (`flexflow.ops.dropout`)."""
        if seed is not None and (not is_int(seed) or seed < 0):  # before the name is taken
            raise ShapeError(f"dropout: seed must be an integer >= 0, got {seed!r}.")
        name = self._layer_name("dropout", name)
        if seed is None:  # far from the small seeds a model passes (distinct streams)
            seed = 2**32 + zlib.crc32(name.encode())
        (out,) = self._add(Dropout(rate, int(seed)), [input], name)
        return out

    def mean(
        self, input: Tensor, dims: Sequence[int], keepdims: bool = False, name: str | None = None
    ) -> Tensor:
        return self._layer(Mean(_axes("mean", dims, name), keepdims), [input], name)

    def reduce_sum(
        self, input: Tensor, axes: Sequence[int], keepdims: bool = False, name: str | None = None
    ) -> Tensor:
        """The sum over `axes` (not the sample's); `keepdims` leaves them as size 1."""
        return self._layer(ReduceSum(_axes("reduce_sum", axes, name), keepdims), [input], name)


def _axes(kind: str, axes: object, name: str | None) -> tuple:
    """`axes` as a tuple: a single integer is one axis; a string or a non-sequence is refused
    here (tuple() would split a string into letters)."""
    if is_int(axes):
        return (axes,)
    if (
        not isinstance(axes, (Sequence, np.ndarray))
        or isinstance(axes, str)
        or not all(is_int(axis) for axis in axes)
    ):
        layer = kind if name is None else f"{kind} '{name}'"
        raise ShapeError(
            f"{layer}: the dimensions to reduce must be a list of integers, got {axes!r}; pass "
            "e.g. [1, 2]."
        )
    return tuple(axes)


_GRAPH_STATE = ("_tensors", "_ops", "_params", "_counters", "_names", "_next_tensor",
                "_sequences", "_read")  # fmt: skip
"""The attributes layer calls change (`_one_layer` restores them on an error)."""


def _one_layer(method):
    """A layer call that raises leaves the model as it was: no half-added ops or tensors, and
    its name free, so the corrected call (a notebook's retry) takes it."""

    @functools.wraps(method)
    def build(self: LayerAPI, *args, **kwargs):
        before = {key: _copied(getattr(self, key)) for key in _GRAPH_STATE}
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            for key, value in before.items():
                setattr(self, key, value)
            raise

    return build


def _copied(value):
    """A copy of a graph container (list, dict, set); a counter as it is."""
    return value.copy() if isinstance(value, list | dict | set) else value


LAYER_METHODS = (
    "create_tensor", "conv2d", "pool2d", "dense", "embedding", "lstm", "multihead_attention",
    "batch_matmul", "concat", "split", "flat", "reshape", "transpose", "add", "subtract",
    "multiply", "divide", "max", "min", "exp", "sin", "cos", "pow", "rsqrt", "scalar_multiply",
    "scalar_add", "scalar_sub", "scalar_true_divide", "identity", "relu", "sigmoid", "tanh",
    "gelu", "elu", "softmax", "batch_norm", "layer_norm", "dropout", "mean", "reduce_sum",
)  # fmt: skip
"""The methods adding to the graph, each one step that succeeds or changes nothing."""
for _name in LAYER_METHODS:
    setattr(LayerAPI, _name, _one_layer(getattr(LayerAPI, _name)))
