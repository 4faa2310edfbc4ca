"""The layer API (FlexFlow's FFModel methods): each call adds one op (LSTMs one op per time
step) to an operator graph and infers its output at once.

Shapes follow FlexFlow: images are NCHW `(sample, channel, height, width)`, sequences are
`(sample, length, channel)`. A wrong input raises `ShapeError` from the op, naming the layer, and
leaves the graph as it was (`flexflow.graph_builder.one_layer`).

Recurrent layers are unrolled per time step as in the paper (§8.1): `lstm` adds one `lstm` op
per step, all sharing one set of weights. It returns a `(sample, length, hidden)` tensor whose
producer (a `stack` of the steps' outputs) is only added to the graph when a non-recurrent layer
reads it; a following `lstm` reads the steps' outputs directly, so layer l at step t waits only
for step t of layer l-1, not for the whole sequence, which is the wavefront parallelism that
model-parallel RNN strategies exploit.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from flexflow.elementwise_layers import ElementwiseLayers
from flexflow.errors import ShapeError
from flexflow.flexflow_arguments import flexflow_only as _flexflow_only
from flexflow.graph import GraphTensor
from flexflow.graph_builder import Tensor, one_layer
from flexflow.ops import ActiMode, DType, TensorSpec
from flexflow.ops.batch_matmul import BatchMatmul
from flexflow.ops.batch_norm import BatchNorm
from flexflow.ops.checks import is_int
from flexflow.ops.concat import Concat
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.dense import Dense
from flexflow.ops.dropout import Dropout
from flexflow.ops.embedding import AggrMode, Embedding
from flexflow.ops.flat import Flat
from flexflow.ops.gather import Gather
from flexflow.ops.layer_norm import LayerNorm
from flexflow.ops.lstm import LSTM
from flexflow.ops.mean import Mean
from flexflow.ops.multihead_attention import MultiHeadAttention
from flexflow.ops.pool2d import Pool2D, PoolType
from flexflow.ops.reduce_sum import ReduceSum
from flexflow.ops.reshape import Reshape
from flexflow.ops.softmax import Softmax
from flexflow.ops.split import Split
from flexflow.ops.transpose import Transpose
from flexflow.regularizers import kernel_l2


class LayerAPI(ElementwiseLayers):
    """Builds an operator graph layer by layer, each layer adding its ops to the graph under
    construction (`GraphBuilder`, whose `graph()` returns it as an immutable value); the
    element-wise layers come from `ElementwiseLayers`. FFModel adds compiling and training."""

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
        """FlexFlow's dense; of its arguments after `use_bias`, `kernel_regularizer` takes an
        L2 regularizer (`flexflow.regularizers.L2(l)`, or any object with FlexFlow's `type`
        RegularizerMode.REG_MODE_L2 and `_lambda`): the kernel's gradient gains l * W once per
        training step; the others take their defaults only."""
        _flexflow_only(
            "dense",
            name,
            datatype=datatype,
            shared_op=shared_op,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
        )
        lam = kernel_l2("dense" if name is None else f"dense '{name}'", kernel_regularizer)
        l2 = {"kernel": lam} if lam else None
        return self._layer(Dense(out_dim, activation, use_bias), [input], name, l2=l2)

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

    def gather(self, input: Tensor, index: Tensor, dim: int, name: str | None = None) -> Tensor:
        """torch.gather along `dim`: `index` (int32/int64, the input's rank and sizes on every
        other dim) picks the input's entries along `dim`; the output has the index's shape. The
        gradient reaches the input alone."""
        return self._layer(Gather(dim), [input, index], name)

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


LAYER_METHODS = (
    "create_tensor", "conv2d", "pool2d", "dense", "embedding", "lstm", "multihead_attention",
    "batch_matmul", "concat", "gather", "split", "flat", "reshape", "transpose", "add",
    "subtract", "multiply", "divide", "max", "min", "exp", "sin", "cos", "pow", "rsqrt",
    "scalar_multiply", "scalar_add", "scalar_sub", "scalar_true_divide", "identity", "relu",
    "sigmoid", "tanh", "gelu", "elu", "softmax", "batch_norm", "layer_norm", "dropout", "mean",
    "reduce_sum",
)  # fmt: skip
"""The methods adding to the graph, each one step that succeeds or changes nothing."""
for _name in LAYER_METHODS:
    setattr(LayerAPI, _name, one_layer(getattr(LayerAPI, _name)))
