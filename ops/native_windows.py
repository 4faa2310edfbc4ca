"""Calls into the C kernels of windowed ops' tiles: pooling, im2col/col2im (native/kernels.c), direct convolutions (native/conv.c)."""

from __future__ import annotations

import numpy as np

from flexflow._kernels import ffi, lib

from .native_args import SUFFIX, f32, floats, pointer


def pool2d_forward(
    x: np.ndarray,
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
    is_max: bool,
) -> np.ndarray:
    """Pool an NCHW slice whose first output row/column start `pad_before` cells before it."""
    x = np.ascontiguousarray(x)
    suffix, ctype = SUFFIX[x.dtype]
    n, c, h, w = x.shape
    y = np.empty((n, c) + tuple(out_hw), dtype=x.dtype)
    getattr(lib, f"ff_pool2d_forward_{suffix}")(
        pointer(x, ctype), pointer(y, ctype), n, c, h, w, out_hw[0], out_hw[1],
        kernel[0], kernel[1], stride[0], stride[1], pad_before[0], pad_before[1], int(is_max),
    )  # fmt: skip
    return y


def pool2d_backward(
    x: np.ndarray,
    dy: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
    is_max: bool,
) -> np.ndarray:
    """The gradient of `pool2d_forward` with respect to its input slice."""
    x = np.ascontiguousarray(x)
    dy = np.ascontiguousarray(dy, dtype=x.dtype)
    suffix, ctype = SUFFIX[x.dtype]
    n, c, h, w = x.shape
    dx = np.empty_like(x)
    getattr(lib, f"ff_pool2d_backward_{suffix}")(
        pointer(x, ctype), pointer(dy, ctype), pointer(dx, ctype), n, c, h, w,
        dy.shape[2], dy.shape[3], kernel[0], kernel[1], stride[0], stride[1],
        pad_before[0], pad_before[1], int(is_max),
    )  # fmt: skip
    return dx


def im2col(
    x: np.ndarray,
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
) -> np.ndarray:
    """x (N, C, H, W) -> columns (N*H'*W', C*kh*kw); cells in the padding read as zeros."""
    x = np.ascontiguousarray(x)
    suffix, ctype = SUFFIX[x.dtype]
    n, c, h, w = x.shape
    cols = np.empty((n * out_hw[0] * out_hw[1], c * kernel[0] * kernel[1]), dtype=x.dtype)
    getattr(lib, f"ff_im2col_{suffix}")(
        pointer(x, ctype), pointer(cols, ctype), n, c, h, w, out_hw[0], out_hw[1],
        kernel[0], kernel[1], stride[0], stride[1], pad_before[0], pad_before[1],
    )  # fmt: skip
    return cols


def col2im(
    cols: np.ndarray,
    x_shape: tuple[int, int, int, int],
    out_hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pad_before: tuple[int, int],
) -> np.ndarray:
    """The adjoint of `im2col`: column gradients summed back onto an (N, C, H, W) input."""
    cols = np.ascontiguousarray(cols)
    suffix, ctype = SUFFIX[cols.dtype]
    n, c, h, w = x_shape
    dx = np.empty(x_shape, dtype=cols.dtype)
    getattr(lib, f"ff_col2im_{suffix}")(
        pointer(cols, ctype), pointer(dx, ctype), n, c, h, w, out_hw[0], out_hw[1],
        kernel[0], kernel[1], stride[0], stride[1], pad_before[0], pad_before[1],
    )  # fmt: skip
    return dx


# ---- direct convolutions of float32 tiles (native/conv.c) --------------------------------------
def _conv_dims(x_shape, out_channels: int, out_hw, kernel, stride, padding):
    """A convolution's ff_window_dims (native/kernels.h)."""
    n, c, h, w = x_shape
    return ffi.new(
        "ff_window_dims *",
        dict(n=n, c=c, h=h, w=w, o=out_channels, oh=out_hw[0], ow=out_hw[1], kh=kernel[0],
             kw=kernel[1], sh=stride[0], sw=stride[1], ph=padding[0], pw=padding[1], is_max=0),
    )  # fmt: skip


class ConvWindow:
    """A convolution of (N, C, H, W) float32 tiles by an (O, C, kh, kw) kernel at stride 1, one
    group, as native/conv.c's direct kernels take it (`ff_window_dims`)."""

    __slots__ = ("dims", "scratch_floats", "isa")

    def __init__(
        self, x_shape, out_channels: int, out_hw, kernel, padding, isa: int = -1, stride=(1, 1)
    ) -> None:
        self.dims = _conv_dims(x_shape, out_channels, out_hw, kernel, stride, padding)
        self.scratch_floats = int(lib.ff_conv_direct_scratch(self.dims))
        self.isa = isa
        """The instruction set the kernels run (lib.FF_ISA_*; -1: this CPU's best): each gives
        the same bits, which tests check on every one this CPU has (`isas`)."""

    @staticmethod
    def isas() -> list[int]:
        """The instruction sets (lib.FF_ISA_*) this CPU runs the direct kernels with."""
        mask = lib.ff_conv_direct_isas()
        return [isa for isa in range(3) if mask >> isa & 1]

    @classmethod
    def of(
        cls, x_shape, out_channels: int, out_hw, kernel, stride, padding, groups: int
    ) -> ConvWindow | None:
        """The direct kernels' window of this convolution, or None where native
        ff_conv_direct's rule leaves it to im2col + GEMM."""
        if groups != 1:
            return None
        window = cls(x_shape, out_channels, out_hw, kernel, padding, stride=stride)
        return window if lib.ff_conv_direct(window.dims) else None

    @staticmethod
    def takes(x_shape, out_channels: int, out_hw, kernel, stride, padding, groups: int) -> bool:
        """Whether the direct kernels run this convolution (`of`)."""
        args = (x_shape, out_channels, out_hw, kernel, stride, padding, groups)
        return ConvWindow.of(*args) is not None

    def _scratch(self) -> np.ndarray:
        return np.empty(self.scratch_floats, dtype=np.float32)

    def forward(self, x: np.ndarray, kernel: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
        """z (N, O, H', W') = the convolution of x by the kernel, plus the bias."""
        d = self.dims
        z = np.empty((d.n, d.o, d.oh, d.ow), dtype=np.float32)
        lib.ff_conv_direct_forward_f32(
            floats(f32(x)), floats(f32(kernel)), floats(None if bias is None else f32(bias)),
            floats(z), d, floats(self._scratch()), self.isa,
        )  # fmt: skip
        return z

    def input_grad(self, dz: np.ndarray, kernel: np.ndarray) -> np.ndarray:
        """dx (N, C, H, W) from dz (N, O, H', W')."""
        d = self.dims
        dx = np.empty((d.n, d.c, d.h, d.w), dtype=np.float32)
        lib.ff_conv_direct_input_grad_f32(
            floats(f32(dz)), floats(f32(kernel)), floats(dx), d, floats(self._scratch()),
            self.isa,
        )  # fmt: skip
        return dx

    def kernel_grad(self, x: np.ndarray, dz: np.ndarray, out: np.ndarray | None = None):
        """The kernel's gradient (O, C, kh, kw) from x and dz, written into `out` (C-contiguous
        float32) when given."""
        d = self.dims
        if out is None:
            out = np.empty((d.o, d.c, d.kh, d.kw), dtype=np.float32)
        lib.ff_conv_direct_kernel_grad_f32(
            floats(f32(x)), floats(f32(dz)), floats(out), d, floats(self._scratch()),
            self.isa,
        )  # fmt: skip
        return out
