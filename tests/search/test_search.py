"""MCMC search, restricted spaces and local optimality on small models."""

from __future__ import annotations

import json

import pytest

from flexflow import FFConfig, FFModel
from flexflow.cli import main
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.local import descend, improving_neighbours
from flexflow.search.spaces import make_space
from flexflow.simulator import SimContext, TaskGraph, full_simulate
from flexflow.strategies import named_strategy
from flexflow.zoo import load_model


def lenet_context(machine: str = "p100:1") -> SimContext:
    return SimContext(load_model("lenet").graph(), parse_machine(machine))


def test_same_seed_and_proposal_budget_give_the_same_result():
    a = search(lenet_context(), budget_s=60, seed=4, max_proposals=240)
    b = search(lenet_context(), budget_s=60, seed=4, max_proposals=240)
    assert a.best == b.best and a.best_s == b.best_s and a.proposals == b.proposals


@pytest.mark.parametrize("proposals", [1, 2, 50])
def test_a_proposal_budget_is_shared_exactly_among_the_chains(proposals):
    """Each chain took ceil(N / chains): `--proposals 1` made 3, `--proposals 50` 51."""
    result = search(lenet_context("p100:2"), budget_s=60, max_proposals=proposals, polish=False)
    k = len(result.chains)  # dp, expert, random and dp-width here
    shares = [proposals // k + (i < proposals % k) for i in range(k)]
    assert sum(shares) == proposals and result.proposals <= proposals
    assert all(c.proposals <= share for c, share in zip(result.chains, shares, strict=True))
    assert result.chains[0].proposals == shares[0]  # data parallelism's chain: not stalled yet


def test_search_is_never_worse_than_its_initial_strategies():
    context = lenet_context()
    result = search(context, budget_s=60, seed=1, max_proposals=600)
    assert result.best_s <= result.dp_s
    for chain in result.chains:
        assert chain.best_s <= chain.initial_s
    # the reported cost is the simulated cost of the returned strategy
    assert full_simulate(TaskGraph(context, result.best)).iteration_s == result.best_s


def test_operation_space_places_every_op_whole_on_one_device():
    context = lenet_context()
    result = search(context, budget_s=60, seed=0, space="operation", max_proposals=300)
    assert all(config.num_tasks == 1 for config in result.best.configs)


def test_local_descent_reaches_a_locally_optimal_strategy():
    model = FFModel(FFConfig(batch_size=8))
    x = model.create_tensor((8, 32))
    model.softmax(model.dense(model.dense(x, 64), 16))
    graph, machine = model.graph(), parse_machine("p100:1")
    context, space = SimContext(graph, machine), make_space("soap", graph, machine)
    start = named_strategy("model", graph, machine)
    base, better = improving_neighbours(context, start, space)
    assert better and all(n.iteration_s < base for n in better)
    # each neighbour is simulated as a delta from the one before it: exactly its own time
    for n in better:
        alone = full_simulate(TaskGraph(context, start.replace(n.op, n.config))).iteration_s
        assert alone == pytest.approx(n.iteration_s, rel=1e-12, abs=0)
    descent = descend(context, start, space)
    optimum = descent.strategy
    assert descent.finished and descent.improved_at_s is not None  # `start` was improvable
    assert not descend(context, optimum, space).improved_at_s  # a local optimum stays put
    cost, none = improving_neighbours(context, optimum, space)
    assert none == [] and cost < base


def test_cli_search_exports_a_strategy_that_simulate_and_check_local_accept(tmp_path, capsys):
    path = tmp_path / "best.json"
    code = main(
        [
            "search",
            "lenet",
            "--machine",
            "p100:1",
            "--proposals",
            "150",
            "--seed",
            "2",
            "--export",
            str(path),
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    for key in (
        "best_iteration_ms",
        "dp_iteration_ms",
        "speedup_over_dp",
        "proposals",
        "acceptance_rate",
        "search_seconds",
    ):
        assert key in out
    assert (
        main(["simulate", "lenet", "--machine", "p100:1", "--strategy", str(path), "--json"]) == 0
    )
    simulated = json.loads(capsys.readouterr().out)
    assert simulated["iteration_ms"] == out["best_iteration_ms"]
    assert (
        main(["check-local", "lenet", "--machine", "p100:1", "--strategy", str(path), "--json"])
        == 0
    )
    assert "improving_neighbours" in json.loads(capsys.readouterr().out)
    assert (
        main(
            [
                "search",
                "lenet",
                "--machine",
                "p100:1",
                "--proposals",
                "60",
                "--init",
                str(path),
                "--quiet",
            ]
        )
        == 0
    )


def test_returned_strategies_are_locally_optimal():
    context = lenet_context()
    result = search(context, budget_s=60, seed=5, max_proposals=150)
    _, better = improving_neighbours(
        context, result.best, make_space("soap", context.graph, context.machine)
    )
    assert better == []
    assert result.best_s <= min(c.best_s for c in result.chains)


def test_a_chain_can_start_from_the_optcnn_baseline():
    from flexflow.search.optcnn import optcnn_strategy

    context = SimContext(load_model("rnnlm", seq_length=4).graph(), parse_machine("p100:1"))
    result = search(context, budget_s=60, seed=0, inits=("optcnn",), max_proposals=60, polish=False)
    (chain,) = result.chains
    assert chain.init == "optcnn"
    assert (
        chain.initial_s == full_simulate(TaskGraph(context, optcnn_strategy(context))).iteration_s
    )
    assert result.best_s <= chain.initial_s


def test_convergence_time_lies_within_the_search():
    result = search(lenet_context(), budget_s=60, seed=3, max_proposals=400)
    assert 0 <= result.converged_s <= result.seconds
    best = min(result.chains, key=lambda c: c.best_s)
    assert result.converged_s >= best.history[-1][0]  # at least the best chain's last gain
    assert result.to_json()["converged_seconds"] == result.converged_s


def test_a_bounded_descent_says_when_it_ran_out_of_time():
    context = lenet_context()
    space = make_space("soap", context.graph, context.machine)
    start = named_strategy("random", context.graph, context.machine, 3)
    ticks = iter(range(10**6))
    descent = descend(context, start, space, budget_s=5, clock=lambda: next(ticks))
    strategy = descent.strategy
    assert not descent.finished  # five clock ticks: five configurations examined
    assert (
        full_simulate(TaskGraph(context, strategy)).iteration_s
        <= full_simulate(TaskGraph(context, start)).iteration_s
    )


def test_converged_time_counts_the_descent_only_when_it_improved():
    from flexflow.search.mcmc import ChainResult
    from flexflow.search.search import SearchResult

    strategy = named_strategy("dp", *_lenet_graph_and_machine())

    def chain(seconds, history):
        return ChainResult("dp", strategy, history[-1][1], 2.0, 10, 5, seconds, history)

    # 1 s of set-up, chains of 4 s and 5 s (the second found the best 2 s into it), a 3 s descent
    chains = (chain(4.0, ((0.0, 2.0), (1.0, 1.5))), chain(5.0, ((0.0, 2.0), (2.0, 1.0))))
    times = {"chains_started_s": (1.0, 5.0), "chains_ended_s": 10.0}  # one after the other
    kept = SearchResult(strategy, 1.0, 2.0, chains, 13.0, 3.0, True, None, **times)
    assert kept.converged_s == pytest.approx(1.0 + 4.0 + 2.0)  # the descent changed nothing
    improved = SearchResult(strategy, 0.9, 2.0, chains, 13.0, 3.0, True, 0.5, **times)
    assert improved.converged_s == pytest.approx(1.0 + 9.0 + 0.5)


def _lenet_graph_and_machine():
    machine = parse_machine("p100:1")
    return load_model("lenet").graph(), machine


def small_batch_norm_cnn() -> FFModel:
    """Two convolutions with batch norms on a batch of 16: on K80 nodes (PCIe and slower
    links) data parallelism simulates fastest on 2 GPUs, on P100s (NVLink) on 4."""
    model = FFModel(FFConfig(batch_size=16))
    x = model.create_tensor((16, 3, 32, 32), name="x")
    x = model.batch_norm(model.conv2d(x, 16, 3, 3, 1, 1, 1, 1, name="conv1"), name="bn1")
    x = model.batch_norm(model.conv2d(x, 16, 3, 3, 1, 1, 1, 1, name="conv2"), name="bn2")
    model.softmax(model.dense(model.flat(x), 10, name="fc"))
    return model


@pytest.mark.parametrize("machine", ["k80:4", "p100:4", "p100:1"])
def test_dp_width_is_the_fastest_data_parallelism_on_a_prefix_of_the_devices(machine):
    from flexflow.search.search import fastest_dp_width
    from flexflow.strategies import data_parallel_over

    context = SimContext(small_batch_norm_cnn().graph(), parse_machine(machine))
    n = context.machine.num_devices
    times = {
        w: full_simulate(TaskGraph(context, data_parallel_over(context.graph, w))).iteration_s
        for w in range(1, n + 1)
        if n % w == 0
    }
    chosen = fastest_dp_width(context)
    chosen_s = full_simulate(TaskGraph(context, chosen)).iteration_s
    assert chosen_s == min(times.values())
    width = len(chosen.devices_used())
    assert times[width] == chosen_s and all(t > chosen_s for w, t in times.items() if w < width)
    if machine == "k80:4":  # narrower than the machine: the chain runs
        assert width == 2 and chosen_s < times[n]


def test_the_dp_width_chain_runs_only_when_it_starts_elsewhere_than_dp():
    context = SimContext(small_batch_norm_cnn().graph(), parse_machine("k80:4"))
    result = search(context, budget_s=60, seed=0, max_proposals=200, polish=False)
    assert [c.init for c in result.chains] == ["dp", "expert", "random", "dp-width"]
    narrow = result.chains[-1]
    assert narrow.initial_s < result.dp_s and result.best_s <= narrow.initial_s
    result = search(lenet_context("p100:1"), budget_s=60, seed=0, max_proposals=200, polish=False)
    assert "dp-width" not in [c.init for c in result.chains]  # LeNet: DP on all 4 is fastest


def test_cli_search_takes_dp_width_as_an_initial_strategy(capsys):
    code = main(["search", "lenet", "--machine", "p100:1", "--init", "dp-width",
                 "--proposals", "50", "--no-polish", "--json"])  # fmt: skip
    assert code == 0
    (chain,) = json.loads(capsys.readouterr().out)["chains"]
    assert chain["init"] == "dp-width"


def test_a_misspelt_initial_strategy_names_the_choices(capsys):
    code = main(
        ["search", "lenet", "--machine", "p100:1", "--init", "dp-widht", "--proposals", "5"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "initial strategy 'dp-widht' is neither a name (dp, expert, model, random, " in err
    assert "dp-width, optcnn) nor a strategy file" in err


@pytest.mark.parametrize("inits", ["", ","])
def test_an_empty_list_of_initial_strategies_is_one_clear_error(capsys, inits):
    code = main(["search", "lenet", "--machine", "p100:1", "--init", inits, "--proposals", "5"])
    assert code == 2
    assert "no initial strategy to start a chain from" in capsys.readouterr().err
