"""Exhaustive search (§8.4) against brute force; the admissibility of its lower bound; MCMC reaching its optimum."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flexflow import ActiMode, FFConfig, FFModel
from flexflow.cli import main
from flexflow.machine import Machine, parse_machine
from flexflow.search import search
from flexflow.search.bound import LowerBound
from flexflow.search.exhaustive import exhaustive_search
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.space import enumerate_configs
from flexflow.strategy import Strategy
from flexflow.zoo import load_model
from tests.simulator.test_delta import random_graph


def two_gpu_machine(slow_second: bool = False) -> Machine:
    """p100:1 cut down to its first two GPUs and the NVLinks between them (a JSON edit)."""
    data = parse_machine("p100:1").to_json()
    keep = {"n0.gpu0", "n0.gpu1"}
    data["name"] = "p100-2gpu" + ("-slow" if slow_second else "")
    data["devices"] = [d for d in data["devices"] if d["name"] in keep]
    data["switches"] = []
    data["links"] = [x for x in data["links"] if x["src"] in keep and x["dst"] in keep]
    for i, link in enumerate(data["links"]):
        link["id"] = i
    if slow_second:  # a heterogeneous machine: the second GPU at a quarter of the speed
        slow = data["devices"][1]
        slow["model"] = "P100 at quarter speed"
        slow["peak_flops"] /= 4
        slow["memory_bandwidth_bytes_per_s"] /= 4
    return Machine.from_json(data)


def dense_chain():
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 32))
    model.softmax(model.dense(model.dense(x, 64), 16))
    return model.graph()


def conv_dense():
    model = FFModel(FFConfig(batch_size=16))
    x = model.create_tensor((16, 3, 16, 16))
    x = model.conv2d(x, 8, 3, 3, 1, 1, 1, 1, ActiMode.AC_MODE_RELU)
    model.dense(model.flat(x), 10)
    return model.graph()


def branches():
    """Two dense layers reading one input, added: an op with two producers and a shared input."""
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 16))
    h = model.dense(x, 32)
    model.softmax(model.add(model.dense(h, 32), model.dense(h, 32)))
    return model.graph()


def brute_force(context: SimContext, space) -> float:
    ops = tuple(node.name for node in context.graph.ops)
    choices = [space(o) for o in range(len(ops))]
    return min(
        full_simulate(TaskGraph(context, Strategy(ops, configs))).iteration_s
        for configs in itertools.product(*choices)
    )


def sampled_space(graph, machine, seed: int, per_op: int):
    """A random subset of each op's SOAP space (the search and the bound take any space)."""
    rng = np.random.default_rng(seed)
    picked = []
    for node in graph.ops:
        configs = enumerate_configs(node.sig, machine)
        keep = rng.choice(len(configs), size=min(per_op, len(configs)), replace=False)
        picked.append(tuple(configs[i] for i in sorted(keep)))
    return lambda op: picked[op]


CASES = {
    "dense chain on p100:1": (dense_chain, lambda: parse_machine("p100:1")),
    "conv + dense on 2 GPUs": (conv_dense, two_gpu_machine),
    "branches on 2 unequal GPUs": (branches, lambda: two_gpu_machine(slow_second=True)),
}


@pytest.mark.parametrize("case", CASES)
def test_exhaustive_search_finds_the_brute_force_optimum(case):
    build_graph, build_machine = CASES[case]
    graph, machine = build_graph(), build_machine()
    space = make_space("soap", graph, machine)
    result = exhaustive_search(SimContext(graph, machine), space, seed_proposals=100)
    assert result.complete
    assert result.best_s == brute_force(SimContext(graph, machine), space)
    assert full_simulate(TaskGraph(SimContext(graph, machine), result.best)).iteration_s == (
        result.best_s
    )
    # every strategy is either simulated or inside a cut subtree
    assert result.total == math.prod(len(space(o)) for o in range(len(graph.ops)))
    assert result.examined + result.pruned_leaves == result.total
    assert result.root_bound_s <= result.best_s


MACHINES = {
    "p100:1": lambda: parse_machine("p100:1"),
    "k80:1": lambda: parse_machine("k80:1"),
    "p100:2": lambda: parse_machine("p100:2"),
    "dgx-h100:1": lambda: parse_machine("dgx-h100:1"),
    "two-gpu": two_gpu_machine,
    "unequal": lambda: two_gpu_machine(slow_second=True),
}


@pytest.mark.parametrize("seed", range(6))
def test_exhaustive_search_matches_brute_force_on_random_graphs_and_spaces(seed):
    """Branching graphs with concat, batch norm or LSTMs (shared weights), in sampled spaces."""
    graph = random_graph(seed)
    machine = MACHINES[tuple(MACHINES)[seed]]()
    space = sampled_space(graph, machine, seed, per_op=2 if len(graph.ops) > 8 else 3)
    result = exhaustive_search(SimContext(graph, machine), space, seed_proposals=0)
    assert result.complete and result.examined + result.pruned_leaves == result.total
    assert result.best_s == brute_force(SimContext(graph, machine), space)


def test_the_bound_prunes_most_of_a_space():
    graph, machine = dense_chain(), parse_machine("p100:1")
    space = make_space("soap", graph, machine)
    result = exhaustive_search(SimContext(graph, machine), space, seed_proposals=0)
    assert result.pruned > 0 and result.pruned_leaves > result.total // 2
    assert result.examined < result.total // 10


def test_a_budget_stops_the_search_without_claiming_an_optimum():
    graph, machine = conv_dense(), two_gpu_machine()
    space = make_space("soap", graph, machine)
    result = exhaustive_search(SimContext(graph, machine), space, seed_proposals=0, budget_s=0.0)
    assert not result.complete and result.covered < 1
    assert result.best_s == result.seed_s  # the best named strategy, nothing proven


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    graph_seed=st.integers(0, 10_000),
    machine=st.sampled_from(tuple(MACHINES)),
    space_seed=st.integers(0, 10_000),
    picks=st.lists(st.integers(0, 10_000), min_size=40, max_size=40),
    assigned=st.integers(0, 40),
)
def test_the_bound_never_exceeds_the_cost_of_a_completion(
    graph_seed, machine, space_seed, picks, assigned
):
    """Admissible: the bound of a partial strategy is at most the simulated time of any completion."""
    graph, m = random_graph(graph_seed), MACHINES[machine]()
    space = sampled_space(graph, m, space_seed, per_op=4)
    context = SimContext(graph, m)
    n = len(graph.ops)
    chosen = [picks[o % len(picks)] % len(space(o)) for o in range(n)]
    strategy = Strategy(
        tuple(node.name for node in graph.ops), tuple(space(o)[k] for o, k in enumerate(chosen))
    )
    cost = full_simulate(TaskGraph(context, strategy)).iteration_s
    bound = LowerBound(context, space)
    assert bound.of(chosen[: min(assigned, n)]) <= cost * (1 + 1e-12)


def test_the_bound_of_lenet_holds_at_every_depth():
    graph, machine = load_model("lenet").graph(), parse_machine("p100:1")
    context = SimContext(graph, machine)
    space = make_space("soap", graph, machine)
    bound = LowerBound(context, space)
    rng = np.random.default_rng(0)
    for _ in range(20):
        chosen = [int(rng.integers(len(space(o)))) for o in range(len(graph.ops))]
        strategy = Strategy(
            tuple(node.name for node in graph.ops),
            tuple(space(o)[k] for o, k in enumerate(chosen)),
        )
        cost = full_simulate(TaskGraph(context, strategy)).iteration_s
        bounds = [bound.of(chosen[:m]) for m in range(len(chosen) + 1)]
        assert max(bounds) <= cost * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_mcmc_reaches_the_exhaustive_optimum(seed):
    """Two branches on unequal GPUs: the named strategies are 29% slower than the optimum."""
    graph, machine = branches(), two_gpu_machine(slow_second=True)
    space = make_space("soap", graph, machine)
    optimum = exhaustive_search(SimContext(graph, machine), space, seed_proposals=0)
    assert optimum.seed_s > 1.2 * optimum.best_s
    found = search(SimContext(graph, machine), budget_s=60, seed=seed, max_proposals=1500)
    assert found.best_s == optimum.best_s


def test_cli_exhaustive_prints_and_exports_the_optimum(tmp_path, capsys):
    path = tmp_path / "optimum.json"
    argv = ["exhaustive", "lenet", "--machine", "p100:1", "--space", "operation"]
    assert main(argv + ["--json", "--export", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("best_iteration_ms", "examined", "pruned", "search_seconds", "proven_optimal"):
        assert key in out
    assert out["proven_optimal"] and out["examined"] + out["pruned_strategies"] == 4**8
    assert [entry["op"] for entry in out["best"]][0] == "conv1"
    assert all(len(entry["devices"]) == 1 for entry in out["best"])
    assert (
        main(["simulate", "lenet", "--machine", "p100:1", "--strategy", str(path), "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["iteration_ms"] == out["best_iteration_ms"]
    assert main(argv + ["--quiet"]) == 0
    assert "optimum" in capsys.readouterr().out


def test_exhaustive_search_refuses_fused_launches():
    from flexflow.errors import FlexFlowError

    graph, machine = dense_chain(), parse_machine("p100:1")
    context = SimContext(graph, machine, fused_launches=True)
    with pytest.raises(FlexFlowError, match="bounds a launch per op"):
        exhaustive_search(context, make_space("soap", graph, machine))


def test_a_space_too_large_to_tabulate_is_refused_before_any_work(capsys, monkeypatch):
    """LeNet on 64 K80s: 186 million configuration pairs (the bound's tables would need over
    200 GiB); the CLI says so and what to run instead, without seeding a chain first."""
    import flexflow.search.exhaustive as exhaustive_module

    def no_seeding(*args, **kwargs):
        raise AssertionError("seeded the search before checking its size")

    monkeypatch.setattr(exhaustive_module, "seed_incumbent", no_seeding)
    assert main(["exhaustive", "lenet", "--machine", "k80:16"]) == 2
    err = capsys.readouterr().err
    assert "too large on k80:16 (64 devices)" in err and "185,560,950 configuration pairs" in err
    assert "flexflow search MODEL --machine k80:16 --budget SECONDS" in err
    assert "Traceback" not in err


def test_a_space_past_a_floats_range_is_refused_as_too_large(capsys):
    """NMT on 16 P100s: 10^352 strategies, more than a float holds (it was an OverflowError
    while the message was written)."""
    assert main(["exhaustive", "nmt", "--machine", "p100:4"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "too large on p100:4 (16 devices)" in err and "about 10^352.0 strategies" in err
