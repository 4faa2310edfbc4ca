"""Which layer calls make a Keras model: the nodes its output depends on, in the order the
script made them (a topological order), checked against the model's inputs."""

from __future__ import annotations

from collections.abc import Sequence

from flexflow.errors import GraphError
from flexflow.keras.tensor import KerasTensor, Node


def nodes_between(inputs: Sequence[KerasTensor], output: KerasTensor) -> list[Node]:
    """The nodes from `inputs` to `output`, oldest first; GraphError where the output reads
    an input not given, a given input is not read, or a layer is called twice."""
    given = {id(t) for t in inputs}
    found: dict[int, Node] = {}
    reached: set[int] = set()
    stack = [output]
    while stack:
        tensor = stack.pop()
        if tensor.node is None:
            if id(tensor) not in given:
                raise GraphError(
                    f"Model: the output depends on input {tensor.name!r} {tensor.batch_shape}, "
                    "which is not among the model's inputs; pass it in Model(inputs=[...])."
                )
            reached.add(id(tensor))
            continue
        if id(tensor.node) not in found:
            found[id(tensor.node)] = tensor.node
            stack.extend(tensor.node.inputs)
    unread = [t.name for t in inputs if id(t) not in reached]
    if unread:
        raise GraphError(
            f"Model: input(s) {', '.join(map(repr, unread))} are not read on the way to the "
            "output; leave them out of Model(inputs=[...])."
        )
    nodes = sorted(found.values(), key=lambda n: n.order)
    check_distinct(nodes)
    return nodes


def check_distinct(nodes: Sequence[Node]) -> None:
    """Each layer is called once in a model: weights are not shared between calls here, and
    each layer's name must name one op of the compiled model."""
    seen: dict[str, Node] = {}
    for node in nodes:
        name = node.layer.name
        if name in seen:
            same = seen[name].layer is node.layer
            what = "is called twice" if same else "names two layers"
            raise GraphError(
                f"Model: layer name {name!r} {what} in this model; "
                + (
                    "weights are not shared between calls here: make a second layer."
                    if same
                    else "give the layers distinct names."
                )
            )
        seen[name] = node


__all__ = ["check_distinct", "nodes_between"]
