"""A search counts the launches of thousands of strategies, each an op or a few away from the
one before, through one memo (`flexflow.launches.LaunchMemo`, with its `FusionMemo`): every
count and every grouping it gives must be the one worked out from scratch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexflow import FFConfig
from flexflow.fusion import FusionMemo, cpu_devices, fuse
from flexflow.launches import LaunchMemo, iteration_tasks, run_groups
from flexflow.machine import parse_machine
from flexflow.search.spaces import make_space
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model

KINDS = {"4 cpus": ("cpu",) * 4, "2 cpus 2 gpus": ("cpu", "cpu", "gpu", "gpu")}
GRAPHS = {
    name: load_model(name, FFConfig(batch_size=8), **sizes).graph()
    for name, sizes in (("lenet", {}), ("resnet101", {"image_size": 32}), ("rnnlm", {}))
}
MACHINE = parse_machine("p100:1")  # four devices; KINDS says which run as CPUs


def _regions(graph, strategy):
    return [
        c.task_regions(n.sig.output_shape) for n, c in zip(graph.ops, strategy.configs, strict=True)
    ]


@settings(max_examples=12, deadline=None)
@given(
    model=st.sampled_from(sorted(GRAPHS)),
    kinds=st.sampled_from(sorted(KINDS)),
    init=st.sampled_from(("dp", "random")),
    staging=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_memo_kept_over_a_walk_of_strategies_counts_as_from_scratch(
    model, kinds, init, staging, seed
):
    """A walk like a chain's: single-op changes, runs of neighbouring ops given one
    configuration, and returns to strategies seen before (an undone proposal)."""
    graph, kinds = GRAPHS[model], KINDS[kinds]
    space, rng = make_space("soap", graph, MACHINE), np.random.default_rng(seed)
    strategy = named_strategy(init, graph, MACHINE, seed)
    memo, seen = LaunchMemo(graph, kinds), [strategy]
    for _ in range(25):
        regions = _regions(graph, strategy)
        assert run_groups(graph, strategy, regions, kinds, staging, memo) == run_groups(
            graph, strategy, regions, kinds, staging
        )
        assert iteration_tasks(graph, strategy, kinds, staging, memo=memo) == iteration_tasks(
            graph, strategy, kinds, staging
        )
        move = rng.random()
        if move < 0.25:
            strategy = seen[int(rng.integers(len(seen)))]
            continue
        op = int(rng.integers(len(graph.ops)))
        config = space(op)[int(rng.integers(len(space(op))))]
        ops = [op]
        if move < 0.5:  # the op and the next ones that can take its configuration
            ops += [o for o in range(op + 1, min(op + 4, len(graph.ops))) if config in space(o)]
        strategy = strategy.replace_many(ops, config)
        seen.append(strategy)


def test_the_memo_keeps_the_groups_of_a_strategy_and_its_exchanging_batch_norms():
    """The same configurations with other batch norms exchanging (`run_groups` drops those
    whose group cannot launch together) group otherwise."""
    graph = GRAPHS["resnet101"]
    dp, cpus = named_strategy("dp", graph, MACHINE), cpu_devices(KINDS["4 cpus"])
    regions, memo = _regions(graph, dp), FusionMemo(graph, cpus)
    norms = frozenset(n.id for n in graph.ops if n.op.statistics_dims)
    for exchanging in (norms, frozenset(), norms, frozenset(sorted(norms)[:3])):
        fresh = fuse(graph, dp, regions, cpus, exchanging)
        first = fuse(graph, dp, regions, cpus, exchanging, memo)
        again = fuse(graph, dp, regions, cpus, exchanging, memo)
        assert first == fresh
        assert all(a is b for a, b in zip(first, again, strict=True))
    assert len(fuse(graph, dp, regions, cpus, norms, memo)) == 1
    assert len(fuse(graph, dp, regions, cpus, frozenset(), memo)) > 100


def test_a_memo_made_for_another_graph_or_machine_is_refused():
    lenet, rnnlm = GRAPHS["lenet"], GRAPHS["rnnlm"]
    dp = named_strategy("dp", lenet, MACHINE)
    regions, kinds = _regions(lenet, dp), KINDS["4 cpus"]
    with pytest.raises(ValueError, match="another graph"):
        iteration_tasks(lenet, dp, kinds, memo=LaunchMemo(rnnlm, kinds))
    with pytest.raises(ValueError, match="another graph"):
        run_groups(lenet, dp, regions, kinds, memo=LaunchMemo(lenet, KINDS["2 cpus 2 gpus"]))
    with pytest.raises(ValueError, match="another graph"):
        fuse(lenet, dp, regions, frozenset(), memo=FusionMemo(lenet, cpu_devices(kinds)))
