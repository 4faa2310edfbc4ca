"""DeviceArray: a frozen, normalized view of device memory, built from the CUDA array interface."""

from __future__ import annotations

import pytest

from flexflow.gpu.device import DeviceArray, contiguous_strides
from flexflow.gpu.errors import UnsupportedTileError


class CudaArrayLike:
    """What Legate's inline allocations expose: `__cuda_array_interface__`."""

    def __init__(self, ptr, shape, typestr, strides=None):
        self.__cuda_array_interface__ = {
            "version": 3,
            "data": (ptr, False),
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
        }


def test_row_major_strides_are_normalized_away():
    a = DeviceArray(4096, (2, 3), "float32", (12, 4))
    assert a.strides is None and a.is_contiguous
    assert a == DeviceArray(4096, (2, 3))
    assert a.element_strides == (3, 1)


def test_size_one_dims_ignore_their_stride():
    assert DeviceArray(0, (1, 3), "float32", (999, 4)).is_contiguous


def test_from_cuda_array_interface_keeps_strides_in_bytes():
    a = DeviceArray.from_cuda_array(CudaArrayLike(1 << 20, (4, 3), "<f4", (32, 4)))
    assert a.ptr == 1 << 20 and a.shape == (4, 3) and a.dtype == "float32"
    assert a.strides == (32, 4) and a.element_strides == (8, 1) and not a.is_contiguous
    b = DeviceArray.from_cuda_array(CudaArrayLike(8, (5,), "<i8"))
    assert b.dtype == "int64" and b.is_contiguous
    assert DeviceArray.from_cuda_array(a) == a  # round trip through its own interface


def test_views_and_reshapes():
    a = DeviceArray(1000, (2, 3, 4))
    assert a.reshape((6, -1)).shape == (6, 4)
    v = a.view((2, 4), (12, 1), offset_elements=4)  # a.[:, 1, :]
    assert v.ptr == 1016 and v.element_strides == (12, 1)
    with pytest.raises(UnsupportedTileError, match=r"cannot view \(2, 4\)"):
        v.reshape((8,))


def test_unsupported_element_types_are_refused_with_the_fix():
    with pytest.raises(UnsupportedTileError, match="float16 .* cast the store to float32"):
        DeviceArray(0, (2,), "float16")


def test_contiguous_strides():
    assert contiguous_strides((2, 3, 4), 4) == (48, 16, 4)
    assert contiguous_strides((2, 0, 4), 8) == (32, 32, 8)
