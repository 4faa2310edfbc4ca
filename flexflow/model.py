"""FFModel: FlexFlow's layer API. Each call adds one op (LSTMs one op per time step) and infers its output at once.

Shapes follow FlexFlow: images are NCHW `(sample, channel, height, width)`, sequences are
`(sample, length, channel)`. A wrong input raises `ShapeError` from the op, naming the layer.

Recurrent layers are unrolled per time step as in the paper (§8.1): `lstm` adds one `lstm` op
per step, all sharing one set of weights. It returns a `(sample, length, hidden)` tensor whose
producer (a `stack` of the steps' outputs) is only added to the graph when a non-recurrent layer
reads it; a following `lstm` reads the steps' outputs directly, so layer l at step t waits only
for step t of layer l-1, not for the whole sequence, which is the wavefront parallelism that
model-parallel RNN strategies exploit.
"""

from __future__ import annotations

import functools
import time
import warnings
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from flexflow.config import FFConfig
from flexflow.data import Batch, DataLoader, check_finite
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
from flexflow.ops.reshape import Reshape
from flexflow.ops.softmax import Softmax
from flexflow.ops.split import Split
from flexflow.ops.stack import Stack
from flexflow.ops.transpose import Transpose
from flexflow.optimizers import Optimizer, chosen_optimizer

if TYPE_CHECKING:
    from rich.console import Console

    from flexflow.cost import Profile
    from flexflow.machine import Machine
    from flexflow.planning import Plan
    from flexflow.runtime.training import Metrics
    from flexflow.strategy import Strategy


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


class FFModel:
    """Builds an operator graph layer by layer; `graph()` returns it as an immutable value."""

    def __init__(self, config: FFConfig | None = None) -> None:
        self.config = config or FFConfig()
        self.name = "model"
        """What exported strategy files name the model (`load_model` sets the zoo name or the
        model file's stem)."""
        self._tensors: dict[int, GraphTensor] = {}
        self._ops: list[OpNode] = []
        self._params: list[Parameter] = []
        self._counters: dict[str, int] = {}
        self._names: set[str] = set()
        self._next_tensor = 0
        # Sequence outputs of `lstm` not materialized yet: tensor id -> the steps' outputs.
        self._sequences: dict[int, tuple[Tensor, ...]] = {}
        self._read: set[int] = set()
        self._trainer = None  # set by compile()
        self._optimizer: Optimizer | None = None  # set before compile (`optimizer`)

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
            raise GraphError(
                f"{kind} '{name}': a layer with this name exists; choose another name."
            )
        self._names.add(name)
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
        if self._trainer is not None:
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
            hidden, cell = self._add(op, inputs, f"{layer}_t{t}", weights, layer)
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
        return self._layer(Mean(tuple(dims), keepdims), [input], name)

    # ---- training (FlexFlow's compile / fit / eval) ----------------------------------------------
    def compile(
        self,
        optimizer: Optimizer | str | None = None,
        loss_type: str = "sparse_categorical_crossentropy",
        metrics: Sequence[str] | None = None,
        *,
        machine: Machine | None = None,
        console: Console | None = None,
        progress: bool = True,
        record_timeline: bool = False,
        profile: Profile | None = None,
        resumed_strategy: Strategy | None = None,
    ) -> Plan:
        """Choose the strategy (config: search_budget, import/export_strategy, trials: after a
        search, the close candidates timed in throwaway executors on this process, alone; a
        run of several ranks searches with seed + rank on each and keeps one pick,
        `flexflow.runtime.agreement`), place the model on this process's Legate processors
        and prepare training; returns how the strategy was chosen. Starts Legate. The model takes no more layers after this. With
        `record_timeline` every task's measured time is kept (`executor.timeline`); `profile`
        (measured task times, `flexflow profile`) prices the search's simulations;
        `resumed_strategy`, the strategy of a checkpoint the run will load
        (`flexflow.checkpoint.checkpoint_strategy`), is kept instead of searching. `metrics`
        default to accuracy under the cross-entropies and to none under mean squared error,
        where accuracy is categorical (the target's largest entry: one-hot targets only).
        `optimizer` may be named ("sgd", "adam": at the config's learning rate); None takes
        the one set as `model.optimizer`, else SGD at the config's learning rate. Compiling
        again (another optimizer, strategy or budget) keeps what the model has trained (its
        weights, batch norm's statistics, the epochs done) and starts the optimizer afresh,
        as Keras does."""
        from flexflow.bootstrap import check_network_library, python_handles_ctrl_c
        from flexflow.runtime.loss import check_model_output, loss_name, metric_names

        check_model_output(self.graph(), loss_type)  # before Legate starts
        self._check_loss_input(loss_type)
        if metrics is None:  # accuracy where the loss is a classification's
            metrics = ("accuracy",) if "crossentropy" in loss_name(loss_type) else ()
        metrics = metric_names(metrics, loss_name(loss_type))  # before the search
        check_network_library()  # one of several ranks: before Legate looks for MPI
        from legate.core import get_legate_runtime  # starts Legate: Realm takes SIGINT

        from flexflow.machine import parse_machine
        from flexflow.planning import plan_strategy
        from flexflow.runtime import Executor
        from flexflow.runtime.agreement import agree_on_strategy
        from flexflow.runtime.training import Trainer
        from flexflow.runtime.trials import time_candidates

        graph, machine = self.graph(), machine or parse_machine("local")
        if optimizer is None:
            optimizer = self.optimizer  # set before, or the compiled one (a checkpoint's)
        optimizer = chosen_optimizer(optimizer, self.config.learning_rate)
        measure = agree = None
        runtime = get_legate_runtime()
        python_handles_ctrl_c()
        if runtime.node_count > 1:  # each rank searches with its seed; all keep one pick
            agree = functools.partial(agree_on_strategy, graph, machine)
        elif self.config.trials:
            measure = functools.partial(
                time_candidates,
                graph,
                loss=loss_type,
                optimizer=optimizer,
                steps_per_execution=self.config.steps_per_execution,
                seed=self.config.seed,
            )
        plan = plan_strategy(
            graph,
            machine,
            budget_s=self.config.search_budget,
            import_path=self.config.import_strategy,
            export_path=self.config.export_strategy,
            model_name=self.name,
            seed=self.config.seed + runtime.node_id,
            console=console,
            profile=profile,
            loss=loss_type,
            steps_per_execution=self.config.steps_per_execution,
            measure=measure,
            agree=agree,
            resumed=resumed_strategy,
        )
        executor = Executor(
            graph,
            plan.strategy,
            seed=self.config.seed,
            optimizer=optimizer,
            record_timeline=record_timeline,
            steps_per_execution=self.config.steps_per_execution,
        )
        try:
            trainer = Trainer(executor, loss_type, metrics, console, progress)
            if self._trainer is not None:  # compiled again: train on from where it stands
                executor.take_trained_state(self._trainer.executor)
        except BaseException:
            executor.close()  # not left open (collection stays off while one is)
            raise
        if self._trainer is not None:
            self._trainer.executor.close()
        self._trainer, self._optimizer = trainer, optimizer
        return plan

    def _check_loss_input(self, loss: str) -> None:
        """Raise ShapeError unless `loss` can read the model's output (a cross-entropy: a
        softmax over the last axis); at compile, before any search."""
        from flexflow.runtime.loss import check_loss_input

        check_loss_input(self.graph(), loss)

    @property
    def optimizer(self) -> Optimizer | None:
        """The optimizer training uses: the compiled model's, or before `compile` the one set
        here (FlexFlow's `model.optimizer = SGDOptimizer(...)`), which `compile` then takes.
        Set on a compiled model it changes the hyperparameters from the next iteration on
        (the same kind of optimizer: its states carry over; `Executor.set_optimizer`)."""
        if self._trainer is not None:  # a loaded checkpoint's may have replaced it
            return self._trainer.executor.optimizer
        return self._optimizer

    @optimizer.setter
    def optimizer(self, optimizer: Optimizer | str) -> None:
        optimizer = chosen_optimizer(optimizer, self.config.learning_rate)
        if self._trainer is not None:
            self._trainer.executor.set_optimizer(optimizer)
        self._optimizer = optimizer

    def set_learning_rate(self, learning_rate: float) -> None:
        """Train on at `learning_rate` (a schedule: call it from fit's `on_epoch`); the other
        hyperparameters and the optimizer's states stay."""
        current = self.optimizer or chosen_optimizer(None, self.config.learning_rate)
        self.optimizer = replace(current, learning_rate=learning_rate)

    @property
    def executor(self):
        """The compiled model's `flexflow.runtime.Executor` (weights, checkpoints)."""
        return self._compiled_trainer().executor

    def _compiled_trainer(self):
        if self._trainer is None:
            raise GraphError("call FFModel.compile(...) before fit, eval or executor.")
        return self._trainer

    def _loader(self, x, y, shuffle: bool, drop_last: bool, targets: bool = True) -> DataLoader:
        """`x` and `y` as a DataLoader of the config's batches, every input and (with
        `targets`) every target checked against the model before the first batch."""
        loader = self._data(x, y, shuffle, drop_last)
        if targets:
            from flexflow.runtime.loss import check_targets

            output = self.graph().ops[-1].sig.output_shape
            check_targets(self._compiled_trainer().loss, output, loader.target, loader.samples)
        return loader

    def _data(self, x, y, shuffle: bool, drop_last: bool) -> DataLoader:
        """`x` and `y` as a DataLoader of the config's batches, each input checked against
        the model's before any batch is cut or fed."""
        graph = self.graph()
        if isinstance(x, DataLoader):
            if y is not None:
                raise ShapeError(
                    "y was given beside a DataLoader, which holds its own targets; pass them "
                    "to the DataLoader, or x and y as arrays."
                )
            if x.batch_size != self.config.batch_size:
                raise ShapeError(
                    f"the DataLoader cuts batches of {x.batch_size}, but the model's batch size "
                    f"is {self.config.batch_size}; make it with "
                    "batch_size=model.config.batch_size."
                )
            data = x.inputs
        else:
            data = self._inputs_by_name(x, graph)
        names = [t.name for t in graph.input_tensors]
        unknown = [name for name in data if name not in names]
        missing = [name for name in names if name not in data]
        if unknown or missing:
            raise ShapeError(
                f"the model's inputs are {names}; the data "
                + (f"names {unknown}, which it has not" if unknown else f"lacks {missing}")
                + ": key x by the input names (or the tensors create_tensor returned)."
            )
        for tensor in graph.input_tensors:
            self._check_input(graph, tensor, data[tensor.name])
        if not all(np.shape(value)[0] for value in data.values()):
            raise ShapeError(
                f"x holds no samples (inputs of shapes {[np.shape(v) for v in data.values()]}); "
                "pass at least one."
            )
        if isinstance(x, DataLoader):
            return x
        return DataLoader(
            data,
            y if y is None or hasattr(y, "shape") else np.asarray(y),  # a list: an array
            self.config.batch_size,
            shuffle=shuffle,
            seed=self.config.seed,
            drop_last=drop_last,
        )

    def _inputs_by_name(self, x, graph: OperatorGraph) -> dict:
        """`x` by input name: a dict by name or by the Tensor create_tensor returned, a list
        or tuple in the inputs' order (several inputs), or the one input's array."""
        inputs = graph.input_tensors
        if isinstance(x, Mapping):
            by_name = {}
            for key, value in x.items():
                if isinstance(key, Tensor) and key.model == id(self) and key.id in self._tensors:
                    key = self._tensors[key.id].name
                key = key if isinstance(key, str) else repr(key)
                if key in by_name:
                    raise ShapeError(
                        f"x gives input '{key}' twice (by name and by tensor); give it once."
                    )
                by_name[key] = value
        elif isinstance(x, (list, tuple)) and (
            len(inputs) > 1 or (len(x) == 1 and np.ndim(x[0]) == len(inputs[0].spec.shape))
        ):  # one array per input (Keras' [x] too); a list of samples is the data itself
            if len(x) != len(inputs):
                raise ShapeError(
                    f"the model has {len(inputs)} inputs {[t.name for t in inputs]}; x holds "
                    f"{len(x)} arrays: pass one per input, in that order, or a dict by name."
                )
            by_name = {t.name: value for t, value in zip(inputs, x, strict=True)}
        elif len(inputs) != 1:
            names = [t.name for t in inputs]
            raise ShapeError(f"the model has inputs {names}: pass x as a dict by those names.")
        else:
            by_name = {inputs[0].name: x}
        return {
            name: value if hasattr(value, "shape") else np.asarray(value)
            for name, value in by_name.items()
        }

    def _check_input(self, graph: OperatorGraph, tensor: GraphTensor, given) -> None:
        """Raise ShapeError unless `given` fits the model input `tensor` (its samples' shape,
        integer ids within the embeddings reading them) and the input has the batch size."""
        if tensor.spec.shape[0] != self.config.batch_size:
            raise ShapeError(
                f"input '{tensor.name}' was created with batch {tensor.spec.shape[0]} (its "
                f"first dimension, {tensor.spec.shape}), but the batch size is "
                f"{self.config.batch_size}; create inputs with model.config.batch_size."
            )
        if not tensor.spec.dtype.is_float:
            _check_ids(graph, tensor, given)
        elif np.dtype(given.dtype).kind not in "fiub":  # strings, objects: not numbers
            raise ShapeError(
                f"input '{tensor.name}' takes numbers ({tensor.spec.dtype.name}), got "
                f"{given.dtype} data; pass a numeric array."
            )
        sample = tensor.spec.shape[1:]
        if tuple(np.shape(given))[1:] != sample:
            raise ShapeError(
                f"input '{tensor.name}' takes samples of shape {sample} (the model's input "
                f"is {tensor.spec.shape}, the batch first), got an array of shape "
                f"{tuple(np.shape(given))}; pass data whose samples have shape {sample}."
            )
        check_finite(f"input '{tensor.name}'", given)

    def fit(
        self,
        x=None,
        y=None,
        epochs: int | None = None,
        *,
        shuffle: bool = True,
        checkpoint: str | None = None,
        on_epoch=None,
        initial_epoch: int | None = None,
        validation_data=None,
    ) -> list[Metrics]:
        """Train on `x` (an array for a one-input model, a dict by input name or input
        tensor, a list in input order, or a DataLoader) and `y` for `epochs` (default: the
        config's) more epochs, as FlexFlow's and Keras' fit do; each call's epochs draw new
        data orders. With `initial_epoch` (Keras'), the epochs from there until `epochs`: a
        run resumed from a checkpoint continues with `fit(x, y, total,
        initial_epoch=model.executor.epochs_done)`. Saves `checkpoint` after each epoch; the
        metrics of the epochs run here (a line per epoch where no `on_epoch` takes them).
        Given arrays, every iteration takes a whole batch (the graph's batch size is fixed):
        an epoch leaves out the samples past the last whole batch, which shuffling changes
        from epoch to epoch; without shuffling the same ones never train, and fit warns of it
        (a DataLoader keeps its own `shuffle` and `drop_last`).
        `validation_data` (Keras'), an (x, y) pair taken as `eval` takes them, is evaluated
        after each epoch (each epoch's Metrics.validation, and its line); it is checked with
        the training data, before the first batch."""
        loader = self._loader(x, y, shuffle, drop_last=True)
        validation = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                size = (
                    f" of {len(validation_data)}"
                    if isinstance(validation_data, tuple | list)
                    else ""
                )
                raise ShapeError(
                    "fit: validation_data is an (x, y) pair, as eval takes them (no sample "
                    f"weights); got a {type(validation_data).__name__}{size}."
                )
            try:
                validation = self._loader(*validation_data, False, drop_last=False)
            except ShapeError as exc:
                raise ShapeError(f"fit: validation_data: {exc}") from None
        rest = loader.samples % loader.batch_size
        if rest and loader.drop_last and not loader.shuffle:
            warnings.warn(
                f"fit: the last {rest} of {loader.samples} samples never train (batches of "
                f"{loader.batch_size}, shuffle=False); shuffle, or pass a whole number of "
                "batches.",
                stacklevel=2,
            )
        trainer = self._compiled_trainer()
        return trainer.fit(
            loader,
            self.config.epochs if epochs is None else epochs,
            checkpoint,
            on_epoch,
            initial_epoch,
            validation,
        )

    def eval(self, x=None, y=None) -> Metrics:
        """Loss and metrics over every sample of `x`, `y` (a short last batch is padded)."""
        loader = self._loader(x, y, False, drop_last=False)
        return self._compiled_trainer().evaluate(loader)

    def train_on_batch(self, x, y) -> Metrics:
        """One training iteration (forward, loss, backward, update) on exactly one batch of
        `x` and `y` (given as `fit` takes them), for a loop written by hand (Keras'
        `train_on_batch`); that batch's loss and metrics, once the iteration is done.
        `fit` is faster: it issues the next iterations while one runs."""
        begin = time.perf_counter()
        stats = self._issue_train_batch(self._one_batch(x, y, "train_on_batch"), "train_on_batch")
        return self._compiled_trainer().batch_metrics([stats], time.perf_counter() - begin)

    def _one_batch(self, x, y, method: str) -> Batch:
        """`x` and `y` as one batch, checked as `fit` checks its data: exactly the model's
        batch size of samples."""
        loader = self._loader(x, y, False, drop_last=False)
        if loader.samples != self.config.batch_size:
            raise ShapeError(
                f"{method} takes one batch of {self.config.batch_size} samples (the model's "
                f"batch size), got {loader.samples}; cut the data into batches, or let fit "
                "do it."
            )
        return next(iter(loader))

    def _issue_train_batch(self, batch: Batch, method: str):
        """Issue one training iteration on `batch` (checked: `_one_batch`) without waiting;
        its unread `flexflow.runtime.batches.BatchStats`. `method` names the caller."""
        return self._compiled_trainer().issue_batch(batch)

    def _issue_eval_batch(self, batch: Batch, method: str):
        """Issue the forward pass and loss of `batch` (no update) without waiting; its
        unread stats."""
        return self._compiled_trainer().issue_eval_batch(batch)

    def predict(self, x) -> np.ndarray:
        """The model's output for every sample of `x` (as `fit` takes it; a DataLoader gives
        its own order), in order, as one numpy array: the forward pass as `eval` runs it
        (dropout passes its input on, batch norm uses its running statistics), one batch at a
        time (a short last batch is padded)."""
        loader = self._loader(x, None, False, drop_last=False, targets=False)
        executor = self._compiled_trainer().executor
        outputs = [executor.forward(batch.inputs)[: batch.valid] for batch in loader.epoch(0)]
        return np.concatenate(outputs)


_GRAPH_STATE = ("_tensors", "_ops", "_params", "_counters", "_names", "_next_tensor",
                "_sequences", "_read")  # fmt: skip
"""The attributes an FFModel's layer calls change (`_one_layer` restores them on an error)."""


def _one_layer(method):
    """A layer call that raises leaves the model as it was: no half-added ops or tensors, and
    its name free, so the corrected call (a notebook's retry) takes it."""

    @functools.wraps(method)
    def build(self: FFModel, *args, **kwargs):
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
    "multiply", "relu", "sigmoid", "tanh", "gelu", "elu", "softmax", "batch_norm", "layer_norm",
    "dropout", "mean",
)  # fmt: skip
"""FFModel's methods adding to the graph, each one step that succeeds or changes nothing."""
for _name in LAYER_METHODS:
    setattr(FFModel, _name, _one_layer(getattr(FFModel, _name)))


def _check_ids(graph: OperatorGraph, tensor: GraphTensor, given) -> None:
    """Raise ShapeError unless the data of integer input `tensor` are integers inside every
    embedding table reading them (a step found out later, without naming the layer or id)."""
    values = np.asarray(given)
    if values.dtype.kind not in "iu":
        raise ShapeError(
            f"input '{tensor.name}' takes integer ids ({tensor.spec.dtype.name}), got "
            f"{values.dtype} data; pass integer arrays (e.g. ids.astype(np.int32))."
        )
    tables = [
        graph.ops[op]
        for op in graph.consumers(tensor.id)
        if hasattr(graph.ops[op].op, "num_embeddings")
    ]
    if not tables or values.size == 0:
        return
    low, high = int(values.min()), int(values.max())
    for node in tables:
        rows = node.op.num_embeddings
        if low < 0 or high >= rows:
            bad = low if low < 0 else high
            fix = (
                "ids are row numbers from 0: map them into its range"
                if bad < 0
                else f"give the embedding num_embeddings > {high} or map the ids into its range"
            )
            raise ShapeError(
                f"input '{tensor.name}' holds id {bad}, outside [0, {rows}) of embedding "
                f"'{node.name}' ({rows} rows); {fix}."
            )
