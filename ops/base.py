"""What every operator kind declares: shapes, SOAP dimensions, tile costs and reference kernels (paper §4, Table 1).

An op definition is a frozen dataclass holding only the layer's hyperparameters (kernel size,
units, ...). Everything that depends on the inputs is derived by `infer`, which validates the
inputs and returns a `Signature`: input, output and weight specs plus the output's dimensions,
each classified as sample, attribute or parameter (or not partitionable).

SOAP partitions the output of an op into equal tiles. A tile is a `Region` of output 0 (one
half-open `[start, stop)` range per dimension); the op tells which region of each input and
each weight that tile needs (`input_regions`, `weight_regions`, with halos for windowed ops),
and how many FLOPs it costs (`flops`). Bytes read and written follow from those regions.

The numpy `forward`/`backward` kernels are the reference every runtime kernel is checked
against. They are dtype-generic (float64 inputs give float64 results) so tests can compare them
with numerical gradients.

What the op kinds share beside: the checks `infer` runs (checks.py), the conventional dimension
names (layouts.py), shape arithmetic (shapes.py).
"""

from __future__ import annotations

import enum
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

SAVED_AT_DEFAULT_ONLY_IF_SET = {"omit_at_default": True}
"""Field metadata of a hyperparameter added to an op kind after its ops were saved (graph
files, measured profiles keyed by `op_attributes`): at its default it is left out of the
attributes, so ops saved before still match (`dataclasses.field(default=...,
metadata=SAVED_AT_DEFAULT_ONLY_IF_SET)`)."""

Shape = tuple[int, ...]
Region = tuple[tuple[int, int], ...]
"""A box in a tensor: one half-open `(start, stop)` range per dimension."""

Arrays = tuple[np.ndarray, ...]


class DimKind(enum.Enum):
    """SOAP's kinds of partitionable output dimension (paper §4)."""

    SAMPLE = "sample"
    ATTRIBUTE = "attribute"
    PARAMETER = "parameter"


class DType(enum.Enum):
    """Element types; `DT_*` are FlexFlow's names for the same members (`DataType.DT_FLOAT`)."""

    FLOAT32 = "float32"
    INT32 = "int32"
    INT64 = "int64"
    DT_FLOAT = "float32"
    DT_INT32 = "int32"
    DT_INT64 = "int64"

    @property
    def itemsize(self) -> int:
        return np.dtype(self.value).itemsize

    @property
    def is_float(self) -> bool:
        return self is DType.FLOAT32


@dataclass(frozen=True, slots=True)
class Dim:
    """One dimension of an op's output: its name and SOAP kind, or `kind=None` if the op cannot split it."""

    name: str
    kind: DimKind | None = None
    block: int = 1
    """A tile must hold whole blocks of this many entries or lie inside one block: a grouped
    convolution's output channels per group (its tile kernels compute whole groups, or part
    of one; a tile straddling groups unevenly computed from the wrong inputs)."""

    @property
    def partitionable(self) -> bool:
        return self.kind is not None

    def fits(self, size: int, degree: int) -> bool:
        """Whether `degree` tiles of this dimension of `size` respect its `block`."""
        tile = size // degree
        return self.block == 1 or tile % self.block == 0 or self.block % tile == 0


@dataclass(frozen=True, slots=True)
class TensorSpec:
    shape: Shape
    dtype: DType = DType.FLOAT32

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def size_bytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True, slots=True)
class WeightSpec:
    """A trainable parameter of an op; `init` names an initializer of `flexflow.ops.init`."""

    name: str
    shape: Shape
    init: str = "glorot_uniform"
    fan_in: int = 1
    fan_out: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class Signature:
    """An op applied to concrete inputs: what it reads, writes, owns, and how its output may be split."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    weights: tuple[WeightSpec, ...]
    dims: tuple[Dim, ...]

    def __post_init__(self) -> None:
        if len(self.dims) != len(self.outputs[0].shape):
            raise AssertionError(f"dims {self.dims} do not match output {self.outputs[0].shape}")
        names = [dim.name for dim in self.dims]
        if len(set(names)) != len(names):  # strategy files key an op's degrees by dim name
            raise AssertionError(f"dims {names} repeat a name: name each dim once")

    @property
    def output_shape(self) -> Shape:
        return self.outputs[0].shape


@dataclass(frozen=True, slots=True)
class TileCost:
    """Work of one task computing one output tile, forward and backward."""

    forward_flops: float
    backward_flops: float
    forward_bytes_read: int
    forward_bytes_written: int
    backward_bytes_read: int
    backward_bytes_written: int


def full_region(shape: Shape) -> Region:
    return tuple((0, s) for s in shape)


def region_shape(region: Region) -> Shape:
    return tuple(stop - start for start, stop in region)


def region_volume(region: Region) -> int:
    return math.prod(stop - start for start, stop in region)


def region_slices(region: Region) -> tuple[slice, ...]:
    return tuple(slice(start, stop) for start, stop in region)


class Op(ABC):
    """Base of every operator kind. Subclasses are `@dataclass(frozen=True, slots=True)`."""

    __slots__ = ()

    kind: ClassVar[str]
    """The registry key, e.g. "conv2d"; also the default layer name prefix."""

    statistics_dims: ClassVar[tuple[str, ...]] = ()
    """Output dims whose split makes tasks combine partial statistics before they finish.

    Batch norm's mean and variance span the batch: when its sample dim is split, each task reads
    only its own tile (`input_regions`) and the tasks sharing a channel range all-reduce their
    per-channel sums and sums of squares (`statistics_elements` floats each). The runtime and
    the simulator add that exchange; every other op leaves this empty.
    """
    training_mode: ClassVar[bool] = False
    """True when the op computes otherwise in training than in inference (dropout drops,
    batch norm uses the batch's statistics): an inference-mode forward pass is not what a
    training step computes."""
    skips_input_grads: ClassVar[bool] = False
    """True when `backward_tile(..., need_input_grads=False)` saves the input gradients' work
    (conv2d's col2im, dense's matmul): the runtime asks so when nothing reads them (the first
    op after the model input). They come back as None then."""

    # ---- shapes -------------------------------------------------------------------------------
    @abstractmethod
    def infer(self, name: str, inputs: Sequence[TensorSpec]) -> Signature:
        """Validate `inputs` for the layer called `name` and derive the signature.

        Raises `ShapeError` naming the layer, the shapes it got and what it expected.
        """

    # ---- SOAP tiles ---------------------------------------------------------------------------
    @abstractmethod
    def input_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        """The region of each input that the output-0 tile `region` reads (halos included)."""

    def weight_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        """The region of each weight the tile reads; by default every weight whole."""
        return tuple(full_region(w.shape) for w in sig.weights)

    def index_limit(self, sig: Signature, which: int) -> int | None:
        """How many values the integer input `which` may take as indices (an embedding's rows,
        a gather's input size along its dim): its data must lie in [0, limit). None when the
        input is no index (every float input)."""
        return None

    def index_terms(self, sig: Signature, limit: int, bad: int, high: int) -> tuple[str, str, str]:
        """How the message for an index outside [0, limit) speaks of this op's indices: what
        one is called, what bounds it, and the fix (`bad`: the index named, `high`: the largest
        given)."""
        return "index", f"{limit} values", f"indices count from 0: map them into [0, {limit})"

    def statistics_elements(self, sig: Signature, region: Region) -> int:
        """Floats each task contributes to the all-reduce over `statistics_dims`; 0 when none."""
        return 0

    def output_regions(self, sig: Signature, region: Region) -> tuple[Region, ...]:
        """The tile of every output: `region`, with dims that are not partitionable taken whole."""
        out = []
        for spec in sig.outputs:
            out.append(
                tuple(
                    rng if dim.partitionable else (0, size)
                    for rng, dim, size in zip(region, sig.dims, spec.shape, strict=True)
                )
            )
        return tuple(out)

    @abstractmethod
    def flops(self, sig: Signature, region: Region) -> tuple[float, float]:
        """Forward and backward FLOPs (a multiply-add counts 2) of the task computing `region`."""

    def tile_cost(self, sig: Signature, region: Region) -> TileCost:
        """FLOPs and bytes of one task.

        Forward reads its input and weight regions and writes its output tiles. Backward reads
        the output gradients, the inputs and weights, and writes gradients of the float inputs
        and of the weights.
        """
        fwd_flops, bwd_flops = self.flops(sig, region)
        in_bytes = [
            region_volume(r) * spec.dtype.itemsize
            for r, spec in zip(self.input_regions(sig, region), sig.inputs, strict=True)
        ]
        float_in_bytes = sum(
            b for b, spec in zip(in_bytes, sig.inputs, strict=True) if spec.dtype.is_float
        )
        w_bytes = sum(
            region_volume(r) * DType.FLOAT32.itemsize for r in self.weight_regions(sig, region)
        )
        out_bytes = sum(
            region_volume(r) * spec.dtype.itemsize
            for r, spec in zip(self.output_regions(sig, region), sig.outputs, strict=True)
        )
        return TileCost(
            forward_flops=fwd_flops,
            backward_flops=bwd_flops,
            forward_bytes_read=sum(in_bytes) + w_bytes,
            forward_bytes_written=out_bytes,
            backward_bytes_read=out_bytes + sum(in_bytes) + w_bytes,
            backward_bytes_written=float_in_bytes + w_bytes,
        )

    # ---- reference kernels --------------------------------------------------------------------
    def forward_tile(
        self,
        sig: Signature,
        region: Region,
        inputs: Sequence[np.ndarray],
        weights: Sequence[np.ndarray],
    ) -> Arrays:
        """The outputs of the task computing output-0 tile `region` (see `output_regions`).

        `inputs` and `weights` are the slices named by `input_regions` and `weight_regions`. For
        most ops the forward pass of those slices is exactly the tile; ops whose result depends on
        where the tile lies (windowed ops at the tensor's borders, dropout's mask) override this.
        """
        return self.forward(inputs, weights)

    def backward_tile(
        self,
        sig: Signature,
        region: Region,
        inputs: Sequence[np.ndarray],
        weights: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        grad_outputs: Sequence[np.ndarray],
        need_input_grads: bool = True,
    ) -> tuple[tuple[np.ndarray | None, ...], Arrays]:
        """The gradients the task of tile `region` contributes: one per input and weight region it
        read (`outputs` and `grad_outputs` are the tile's). Contributions of tasks whose regions
        overlap (halos, replicated weights) are summed. `need_input_grads`: see
        `skips_input_grads`."""
        if need_input_grads or not self.skips_input_grads:
            return self.backward(inputs, weights, outputs, grad_outputs)
        return self.backward(inputs, weights, outputs, grad_outputs, need_input_grads=False)

    def backward_tile_into(
        self,
        sig: Signature,
        region: Region,
        inputs: Sequence[np.ndarray],
        weights: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        grad_outputs: Sequence[np.ndarray],
        need_input_grads: bool,
        weight_grads_into: Sequence[np.ndarray | None],
        saved: object | None = None,
    ) -> tuple[tuple[np.ndarray | None, ...], Arrays]:
        """`backward_tile`, where an op may write a weight gradient straight into the array given
        for it (`weight_grads_into`, one per weight region, None where there is none) and return
        that array as the gradient, sparing the task the copy into its output (data
        parallelism's flat gradient buffers: the MLP's 669k gradients were 9% of a step task's
        time). The default computes them anew; the arrays are only written, never read.
        `saved`: what `forward_tile_saving` kept for this tile in the same task, or None."""
        if need_input_grads or not self.skips_input_grads:
            return self.backward_tile(sig, region, inputs, weights, outputs, grad_outputs)
        return self.backward_tile(sig, region, inputs, weights, outputs, grad_outputs, False)

    def forward_tile_saving(
        self,
        sig: Signature,
        region: Region,
        inputs: Sequence[np.ndarray],
        weights: Sequence[np.ndarray],
    ) -> tuple[Arrays, object | None]:
        """`forward_tile`, and what this tile's backward may reuse when it runs in the same task
        (a training step keeps its activations in memory): an LSTM step's gates, which its
        backward would otherwise recompute (`backward_tile_into`'s `saved`). None by default."""
        return self.forward_tile(sig, region, inputs, weights), None

    @abstractmethod
    def forward(self, inputs: Sequence[np.ndarray], weights: Sequence[np.ndarray]) -> Arrays:
        """Numpy reference forward pass: the outputs, in order."""

    @abstractmethod
    def backward(
        self,
        inputs: Sequence[np.ndarray],
        weights: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
        grad_outputs: Sequence[np.ndarray],
    ) -> tuple[tuple[np.ndarray | None, ...], Arrays]:
        """Numpy reference backward pass: (gradient of each input, gradient of each weight).

        The gradient of an integer input (embedding indices) is None.
        """


class GradientsInto:
    """For an op whose `backward_tile_into` is its backward kernel: `backward_tile` is that,
    with no array to write a gradient into. Put it before `Op` among the bases."""

    __slots__ = ()

    def backward_tile(
        self, sig, region, inputs, weights, outputs, grad_outputs, need_input_grads=True
    ):
        return self.backward_tile_into(
            sig, region, inputs, weights, outputs, grad_outputs, need_input_grads, ()
        )


def writable_into(array: np.ndarray | None, shape: tuple[int, ...], *operands: np.ndarray):
    """`array` if a result of `shape` computed from `operands` can be written into it exactly as
    it would be computed anew (same shape and type, C-contiguous, writable), else None: where
    an op writes a weight gradient straight into its task's output (`backward_tile_into`)."""
    if array is None or array.shape != tuple(shape) or not array.flags.c_contiguous:
        return None
    if not array.flags.writeable or array.dtype != np.result_type(*operands):
        return None
    return array
