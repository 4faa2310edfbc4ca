"""The layer API's element-wise layers: binary arithmetic, FlexFlow's unary and scalar functions, activations as layers."""

from __future__ import annotations

from flexflow.flexflow_arguments import flexflow_only as _flexflow_only
from flexflow.graph_builder import GraphBuilder, Tensor
from flexflow.ops import ActiMode
from flexflow.ops.element_binary import BinaryOp, ElementBinary
from flexflow.ops.element_unary import ElementUnary
from flexflow.ops.unary_functions import UnaryFunction


class ElementwiseLayers(GraphBuilder):
    """The element-wise layer methods, each adding one `element_binary` or `element_unary` op;
    `flexflow.layers.LayerAPI` offers them with the other layers. The binary ones (add,
    subtract, multiply, divide, max, min) broadcast as FlexFlow's: inputs of one rank, each
    dimension equal in both or 1 in one, which is repeated along it; never the sample's
    (`flexflow.ops.element_binary.broadcast_shape`)."""

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
