"""The operator graph under construction behind the layer API: tensor handles, ops added with their weights, failed layer calls undone.

`GraphBuilder` holds what the layer calls have added so far: ops in the order they came (a
topological order), tensors, parameters and the names taken. An LSTM's sequence output is a
handle first; the `stack` op producing it is added only when a layer reads it or the graph is
taken (`flexflow.layers` explains why). `one_layer` makes a layer call one step: it succeeds
or leaves every one of these as it was.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flexflow.errors import GraphError, NotOfferedError, ShapeError
from flexflow.graph import GraphTensor, OperatorGraph, OpNode, Parameter
from flexflow.ops import DType, Op, TensorSpec
from flexflow.ops.checks import python_scalars
from flexflow.ops.stack import Stack

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


class GraphBuilder:
    """Builds an operator graph op by op; `graph()` returns it as an immutable value. The
    layer API (`flexflow.layers.LayerAPI`) adds its layers through `_add` and `_layer`."""

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
        l2: Mapping[str, float] | None = None,
    ) -> tuple[Tensor, ...]:
        """Infer `op` on `inputs` and append it as part of `layer` (default: its own name).

        Its weights are new (named `<layer>.<weight>`, with the L2 lambda `l2` gives by the
        weight's name, e.g. {"kernel": 0.001}) unless `shared_weights` gives the ids of
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
                lam = (l2 or {}).get(wspec.name, 0.0)
                self._params.append(Parameter(pid, f"{layer}.{wspec.name}", wspec, lam))
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

    def _layer(
        self,
        op: Op,
        inputs: Sequence[Tensor],
        name: str | None,
        l2: Mapping[str, float] | None = None,
    ) -> Tensor:
        (out,) = self._add(op, inputs, self._layer_name(op.kind, name), l2=l2)
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


_GRAPH_STATE = ("_tensors", "_ops", "_params", "_counters", "_names", "_next_tensor",
                "_sequences", "_read")  # fmt: skip
"""The attributes layer calls change (`one_layer` restores them on an error)."""


def one_layer(method):
    """A layer call that raises leaves the model as it was: no half-added ops or tensors, and
    its name free, so the corrected call (a notebook's retry) takes it."""

    @functools.wraps(method)
    def build(self: GraphBuilder, *args, **kwargs):
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
