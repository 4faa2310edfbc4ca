"""Every registered op kind has GPU forward and backward tiles, so a new kind cannot silently lack them."""

from __future__ import annotations

import inspect

import pytest

from flexflow.gpu import tiles
from flexflow.gpu.cases import CASES
from flexflow.gpu.errors import UnsupportedTileError
from flexflow.gpu.libraries import LIBRARIES
from flexflow.ops import OP_KINDS


def test_every_op_kind_has_gpu_tiles():
    assert tiles.missing_kinds() == [], "add GPU tiles to flexflow.gpu.tiles.GPU_TILES"
    assert set(tiles.GPU_TILES) == set(OP_KINDS)


@pytest.mark.parametrize("kind", sorted(tiles.GPU_TILES))
def test_tiles_take_the_reference_arguments(kind):
    entry = tiles.GPU_TILES[kind]
    forward = list(inspect.signature(entry.forward).parameters)
    backward = list(inspect.signature(entry.backward).parameters)
    assert forward == ["gpu", "op", "sig", "region", "inputs", "weights"]
    assert backward == forward + ["outputs", "grad_outputs"]
    assert set(entry.libraries) <= set(LIBRARIES)


def test_every_op_kind_has_a_check_case():
    assert {case.op.kind for case in CASES} == set(OP_KINDS)


def test_an_op_kind_without_tiles_is_refused_by_name():
    class Unknown:
        kind = "hypothetical_op"

    with pytest.raises(UnsupportedTileError, match="hypothetical_op: no GPU kernels"):
        tiles.gpu_tile(Unknown())
