"""Python arrays as the C simulator reads them (paper §5): typecode sizes checked, C views made.

Every module calling into C (`native_loop`, `native_blocks`, `native_overlaps`) hands it
`array`s by their typecode; this module holds the one check that the platform's typecodes have
the sizes the C side reads, and the views the block builders' structs point into (`c_views`).
"""

from __future__ import annotations

from array import array

from flexflow._simulator import ffi

# The C side reads array typecodes b, i, q, Q, d as int8, int32, int64, uint64 and double.
if [array(code).itemsize for code in "biqQd"] != [1, 4, 8, 8, 8]:
    raise AssertionError("this platform's array typecodes do not have the sizes the C side reads")


_C_ARRAY = {"b": "int8_t[]", "i": "int32_t[]", "q": "int64_t[]", "Q": "uint64_t[]", "d": "double[]"}


def c_views(*arrays: array) -> list:
    """C views of `arrays` (by typecode): they must outlive the call that reads them."""
    return [ffi.from_buffer(_C_ARRAY[values.typecode], values) for values in arrays]
