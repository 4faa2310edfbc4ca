"""FlexFlow's layer arguments this API does not implement, taken where they change nothing.

A layer call written for FlexFlow passes its data types, in-place flags, shared ops,
initializers and hints by position before `name` (`dense(x, 8, AC_MODE_RELU, True,
DT_FLOAT)`). `FFModel`'s layers take them in FlexFlow's order so such calls land where they
belong; `flexflow_only` takes the values that change nothing here and refuses the rest naming
the way this API does it.
"""

from __future__ import annotations

from collections.abc import Callable

from flexflow.errors import ShapeError
from flexflow.ops import DType
from flexflow.ops.checks import is_int

FLEXFLOW_ONLY: dict[str, tuple[Callable[[object], bool], str]] = {
    # FlexFlow's layer arguments this API does not implement: a call written for FlexFlow
    # passes them positionally before `name`; the values that change nothing are taken
    "datatype": (lambda v: v is None or v is DType.FLOAT32, "layers compute in float32"),
    "data_type": (lambda v: v is None or v is DType.FLOAT32, "layers compute in float32"),
    "dtype": (lambda v: v is None or v is DType.FLOAT32, "embeddings are float32"),
    "shared_op": (
        lambda v: v is None,
        "layers do not share weights by shared_op (an unrolled lstm's steps share theirs)",
    ),
    # an initializer object naming the layer's own default (flexflow.core's Glorot kernels,
    # zero biases) changes nothing
    "kernel_initializer": (
        lambda v: v is None or getattr(v, "init", None) == "glorot_uniform",
        "kernels start Glorot-uniform here; set other initial weights with "
        "model.executor.set_weights(...) after compile",
    ),
    "bias_initializer": (
        lambda v: v is None or getattr(v, "init", None) == "zeros",
        "biases start at zero here; set other initial weights with "
        "model.executor.set_weights(...) after compile",
    ),
    "embedding_initializer": (
        lambda v: v is None or getattr(v, "init", None) == "normal",
        "embeddings start from a normal draw here; set other initial weights with "
        "model.executor.set_weights(...) after compile",
    ),
    "inplace": (lambda v: isinstance(v, bool), "pass True or False: the result is the same"),
    "inplace_a": (lambda v: isinstance(v, bool), "pass True or False: the result is the same"),
    "create_grad": (lambda v: isinstance(v, bool), "pass True or False: inputs take none"),
    "use_bias": (lambda v: v is True, "a layer norm's affine transform always has its bias"),
    "add_bias_kv": (lambda v: v is False, "attention adds no bias to keys and values"),
    "add_zero_attn": (lambda v: v is False, "attention adds no zero batch"),
    "a_seq_length_dim": (lambda v: v is None or is_int(v), "pass a dimension or None"),
    "b_seq_length_dim": (lambda v: v is None or is_int(v), "pass a dimension or None"),
}


def flexflow_only(kind: str, name: str | None, **arguments: object) -> None:
    """Raise ShapeError for a FlexFlow-only argument (`FLEXFLOW_ONLY`) holding a value this
    API cannot honour, naming the way here; a str there is a name passed by position."""
    for argument, value in arguments.items():
        takes, why = FLEXFLOW_ONLY[argument]
        if takes(value):
            continue
        layer = kind if name is None else f"{kind} '{name}'"
        hint = f" (a layer name goes by keyword: name={value!r})" if isinstance(value, str) else ""
        argument = "kernel_initializer" if argument == "embedding_initializer" else argument
        raise ShapeError(
            f"{layer}: {argument}={value!r} is one of FlexFlow's arguments this API does not "
            f"implement: {why}{hint}."
        )
