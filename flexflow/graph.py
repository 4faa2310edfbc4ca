"""The operator graph G of the paper (§3): ops, the tensors between them and their parameters; shapes only, no data.

Ops are kept in topological order (the order the layer API created them). A parameter may be
shared by several ops (the time steps of an unrolled LSTM share one set of weights). The graph
is an immutable value: it serializes to JSON and back, and renders to DOT (`flexflow.render`).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from flexflow.errors import GraphError, ShapeError, shown
from flexflow.ops import OP_KINDS, DType, Op, Signature, TensorSpec, WeightSpec
from flexflow.ops.base import full_region
from flexflow.ops.checks import is_float32_lambda

GRAPH_FORMAT = "flexflow-operator-graph"
GRAPH_VERSION = 1


@dataclass(frozen=True, slots=True)
class GraphTensor:
    """A tensor of the graph; `producer` is the id of the op writing it, None for a model input."""

    id: int
    name: str
    spec: TensorSpec
    producer: int | None = None
    index: int = 0  # which output of the producer


@dataclass(frozen=True, slots=True)
class Parameter:
    """A trainable weight; `name` is `<layer>.<weight>`, e.g. `conv1.kernel`."""

    id: int
    name: str
    spec: WeightSpec
    l2: float = 0.0
    """The lambda of an L2 regularizer on this weight (a dense layer's kernel_regularizer):
    its update's gradient gains l2 * weight once per training step (`flexflow.regularizers`);
    0.0: none. Here, not on the op, so the op's attributes and costs stay an unregularized
    one's."""

    def __post_init__(self) -> None:
        if not is_float32_lambda(self.l2):
            raise GraphError(
                f"parameter '{self.name}': its L2 lambda must be a number >= 0 that float32 "
                f"holds (finite, nonzero unless 0), got {shown(self.l2)}; give its layer's "
                'kernel_regularizer e.g. L2(0.001), or fix its "l2" in a graph file.'
            )
        object.__setattr__(self, "l2", float(self.l2))  # a numpy scalar would not be JSON


@dataclass(frozen=True, slots=True)
class OpNode:
    id: int
    name: str
    op: Op
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    weights: tuple[int, ...]
    sig: Signature
    layer: str = ""
    """The layer this op belongs to: its own name, or the LSTM layer of an unrolled time step."""

    def __post_init__(self) -> None:
        if not self.layer:
            object.__setattr__(self, "layer", self.name)

    @property
    def kind(self) -> str:
        return self.op.kind


@dataclass(frozen=True, slots=True)
class Edge:
    """Tensor `tensor` flows from op `src` to op `dst`."""

    src: int
    dst: int
    tensor: int


@dataclass(frozen=True)
class OperatorGraph:
    ops: tuple[OpNode, ...]
    tensors: tuple[GraphTensor, ...]
    parameters: tuple[Parameter, ...]

    def __post_init__(self) -> None:
        seen_tensors: set[int] = {t.id for t in self.tensors if t.producer is None}
        names: set[str] = set()
        for position, node in enumerate(self.ops):
            if node.id != position:
                raise GraphError(f"op '{node.name}' has id {node.id}, expected {position}.")
            if node.name in names:
                raise GraphError(f"two ops are named '{node.name}'; layer names must be unique.")
            names.add(node.name)
            for tid in node.inputs:
                if tid not in seen_tensors:
                    raise GraphError(
                        f"{node.kind} '{node.name}' reads tensor {tid} before any op produces it; "
                        "ops must be listed in topological order."
                    )
            seen_tensors.update(node.outputs)

    # ---- lookups ------------------------------------------------------------------------------
    @cached_property
    def _tensor_by_id(self) -> dict[int, GraphTensor]:
        return {t.id: t for t in self.tensors}

    @cached_property
    def _op_by_name(self) -> dict[str, OpNode]:
        return {node.name: node for node in self.ops}

    @cached_property
    def _consumers(self) -> dict[int, tuple[int, ...]]:
        consumers: dict[int, list[int]] = {t.id: [] for t in self.tensors}
        for node in self.ops:
            for tid in node.inputs:
                if node.id not in consumers[tid]:
                    consumers[tid].append(node.id)
        return {tid: tuple(ops) for tid, ops in consumers.items()}

    def tensor(self, tensor_id: int) -> GraphTensor:
        return self._tensor_by_id[tensor_id]

    def op(self, name: str) -> OpNode:
        try:
            return self._op_by_name[name]
        except KeyError:
            raise GraphError(f"the graph has no op named '{name}'.") from None

    def computes_input_grads(self, op: int) -> bool:
        """Whether op `op`'s backward computes its inputs' gradients: some input is another op's
        output. An op reading only model inputs computes none (nothing would read them), so its
        backward costs less than the same op's elsewhere (`flexflow.cost.cost_key`)."""
        return any(self.tensor(t).producer is not None for t in self.ops[op].inputs)

    def consumers(self, tensor_id: int) -> tuple[int, ...]:
        """Ids of the ops reading tensor `tensor_id`, in topological order."""
        return self._consumers[tensor_id]

    def index_limits(self, tensor_id: int) -> tuple[tuple[OpNode, int], ...]:
        """The ops reading integer tensor `tensor_id` as indices, each with how many values it
        takes (`Op.index_limit`: an embedding's rows, a gather's input size along its dim),
        through the ops that only move integers (a reshape, transpose, concat or split of
        ids: the ops taking integer tensors pass their values on unchanged), so a model
        input's data are checked against every op indexing with them."""
        limits, seen, todo = [], set(), [tensor_id]
        while todo:
            tid = todo.pop()
            for op in self.consumers(tid):
                node = self.ops[op]
                for which, read in enumerate(node.inputs):
                    limit = node.op.index_limit(node.sig, which) if read == tid else None
                    if limit is not None and (node.id, limit) not in seen:
                        seen.add((node.id, limit))
                        limits.append((node, limit))
                todo += [o for o in node.outputs if not self.tensor(o).spec.dtype.is_float]
        return tuple(limits)

    def token_vocabulary(self, tensor_id: int) -> int:
        """How many ids an integer tensor may hold: the fewest any op reading it as indices
        takes (each id indexes every such table or axis), 2 where none does."""
        return min((limit for _, limit in self.index_limits(tensor_id)), default=2)

    @property
    def edges(self) -> Iterator[Edge]:
        for node in self.ops:
            for tid in dict.fromkeys(node.inputs):
                producer = self.tensor(tid).producer
                if producer is not None:
                    yield Edge(producer, node.id, tid)

    @property
    def input_tensors(self) -> tuple[GraphTensor, ...]:
        return tuple(t for t in self.tensors if t.producer is None)

    @property
    def output_tensors(self) -> tuple[GraphTensor, ...]:
        """Tensors no op reads: the model's outputs."""
        return tuple(t for t in self.tensors if t.producer is not None and not self.consumers(t.id))

    # ---- totals -------------------------------------------------------------------------------
    @property
    def num_parameters(self) -> int:
        return sum(p.spec.size for p in self.parameters)

    def flops_per_iteration(self) -> tuple[float, float]:
        """Forward and backward FLOPs of one training iteration, each op run as one task."""
        forward = backward = 0.0
        for node in self.ops:
            fwd, bwd = node.op.flops(node.sig, full_region(node.sig.output_shape))
            forward += fwd
            backward += bwd
        return forward, backward

    # ---- JSON ---------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "format": GRAPH_FORMAT,
            "version": GRAPH_VERSION,
            "tensors": [
                {
                    "id": t.id,
                    "name": t.name,
                    "shape": list(t.spec.shape),
                    "dtype": t.spec.dtype.value,
                }
                for t in self.tensors
                if t.producer is None
            ],
            "parameters": [_parameter_json(p) for p in self.parameters],
            "ops": [
                {
                    "name": node.name,
                    "kind": node.kind,
                    "attributes": op_attributes(node.op),
                    "inputs": list(node.inputs),
                    "outputs": list(node.outputs),
                    "weights": list(node.weights),
                    "layer": node.layer,
                }
                for node in self.ops
            ],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, data: Any) -> OperatorGraph:
        """Rebuild a graph from `to_json` output, re-inferring and checking every shape."""
        try:
            return _graph_from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, GraphError | ShapeError):
                raise
            raise GraphError(
                f"malformed operator graph file: {exc!r}; regenerate it with `OperatorGraph.dumps()`."
            ) from None


# ---- op attributes <-> JSON -----------------------------------------------------------------------


def _parameter_json(param: Parameter) -> dict[str, Any]:
    """A parameter's entry in a graph file; its L2 lambda only where it has one, so the files
    of unregularized models read as before."""
    entry: dict[str, Any] = {"id": param.id, "name": param.name, "weight": param.spec.name}
    if param.l2:
        entry["l2"] = param.l2
    return entry


def _to_plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_to_plain(v) for v in value]
    return value


def op_attributes(op: Op) -> dict[str, Any]:
    """The hyperparameters of an op as JSON-ready values (enums by value, tuples as lists);
    a field added later is left out at its default (`SAVED_AT_DEFAULT_ONLY_IF_SET`)."""
    return {
        f.name: _to_plain(getattr(op, f.name))
        for f in dataclasses.fields(op)
        if not (f.metadata.get("omit_at_default") and getattr(op, f.name) == f.default)
    }


def _from_plain(hint: Any, value: Any) -> Any:
    origin = typing.get_origin(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(value)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_plain(args[0], v) for v in value)
        return tuple(_from_plain(a, v) for a, v in zip(args, value, strict=True))
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        non_none = [a for a in typing.get_args(hint) if a is not type(None)]
        return _from_plain(non_none[0], value)
    return value


def op_from_attributes(kind: str, attributes: dict[str, Any]) -> Op:
    if kind not in OP_KINDS:
        raise GraphError(f"unknown op kind '{kind}'; known kinds: {', '.join(sorted(OP_KINDS))}.")
    cls = OP_KINDS[kind]
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in attributes:
            values[f.name] = _from_plain(hints[f.name], attributes[f.name])
    return cls(**values)


def _graph_from_json(data: Any) -> OperatorGraph:
    if not isinstance(data, dict) or data.get("format") != GRAPH_FORMAT:
        raise GraphError(f'not an operator graph file: expected "format": "{GRAPH_FORMAT}".')
    if data.get("version") != GRAPH_VERSION:
        raise GraphError(
            f"operator graph file version {data.get('version')!r} is not supported; "
            f"this flexflow reads version {GRAPH_VERSION}."
        )
    tensors: dict[int, GraphTensor] = {}
    for t in data["tensors"]:
        spec = TensorSpec(tuple(t["shape"]), DType(t["dtype"]))
        tensors[t["id"]] = GraphTensor(t["id"], t["name"], spec)
    param_names = {p["id"]: p["name"] for p in data["parameters"]}
    param_l2 = {p["id"]: p.get("l2", 0.0) for p in data["parameters"]}
    params: dict[int, Parameter] = {}
    ops: list[OpNode] = []
    for position, entry in enumerate(data["ops"]):
        name = entry["name"]
        op = op_from_attributes(entry["kind"], entry["attributes"])
        try:
            inputs = tuple(tensors[tid].spec for tid in entry["inputs"])
        except KeyError as missing:
            raise GraphError(
                f"op '{name}' reads tensor {missing} that no earlier op produces."
            ) from None
        sig = op.infer(name, inputs)
        if len(entry["outputs"]) != len(sig.outputs) or len(entry["weights"]) != len(sig.weights):
            raise GraphError(
                f"op '{name}': file lists {len(entry['outputs'])} outputs and "
                f"{len(entry['weights'])} weights, the op has {len(sig.outputs)} and {len(sig.weights)}."
            )
        for index, (tid, spec) in enumerate(zip(entry["outputs"], sig.outputs, strict=True)):
            tensors[tid] = GraphTensor(tid, f"{name}:{index}", spec, position, index)
        for pid, wspec in zip(entry["weights"], sig.weights, strict=True):
            if pid in params and params[pid].spec.shape != wspec.shape:
                raise GraphError(f"op '{name}' shares parameter {pid} with a different shape.")
            params.setdefault(pid, Parameter(pid, param_names[pid], wspec, param_l2[pid]))
        ops.append(
            OpNode(
                position,
                name,
                op,
                tuple(entry["inputs"]),
                tuple(entry["outputs"]),
                tuple(entry["weights"]),
                sig,
                entry.get("layer", name),
            )
        )
    return OperatorGraph(
        tuple(ops),
        tuple(sorted(tensors.values(), key=lambda t: t.id)),
        tuple(sorted(params.values(), key=lambda p: p.id)),
    )
