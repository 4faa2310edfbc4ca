"""SimContext's memoized geometry equals the ops' own definitions it stands in for."""

from __future__ import annotations

import itertools

from flexflow.cost import CostModel
from flexflow.machine import parse_machine
from flexflow.ops.shapes import tile_region
from flexflow.simulator import SimContext
from flexflow.space import enumerate_configs
from flexflow.zoo import load_model


def test_regions_are_the_tiles_in_row_major_order():
    graph = load_model("lenet").graph()
    machine = parse_machine("p100:4")
    context = SimContext(graph, machine, CostModel())
    for node in graph.ops:
        for degrees in {config.degrees for config in enumerate_configs(node.sig, machine)}:
            shape = node.sig.output_shape
            coords = itertools.product(*(range(d) for d in degrees))
            expected = tuple(tile_region(shape, degrees, c) for c in coords)
            assert context.regions(node.id, degrees) == expected
