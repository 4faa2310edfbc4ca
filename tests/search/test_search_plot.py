"""A search drawn as a picture: the chains' and the final descent's best times over the search."""

from __future__ import annotations

import pytest

from flexflow.cli import main
from flexflow.errors import FlexFlowError
from flexflow.machine import parse_machine
from flexflow.search import search
from flexflow.search.plot import render_search
from flexflow.simulator import SimContext
from flexflow.zoo import load_model

PNG = b"\x89PNG\r\n\x1a\n"


def lenet_search(**options):
    context = SimContext(load_model("lenet").graph(), parse_machine("p100:1"))
    return search(context, budget_s=60, seed=1, max_proposals=300, **options)


def test_the_descent_history_runs_from_the_chains_best_to_the_result():
    result = lenet_search()
    best_chain = min(c.best_s for c in result.chains)
    history = result.descent_history
    assert history[0] == (0.0, pytest.approx(best_chain))  # it starts where the chains ended
    assert history[-1][1] == pytest.approx(result.best_s)  # and ends at what is returned
    costs = [cost for _, cost in history]
    assert all(later < earlier for earlier, later in zip(costs, costs[1:], strict=False))
    assert all(0 <= t <= result.polish_s for t, _ in history)
    assert lenet_search(polish=False).descent_history == ()


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_a_search_draws_to_the_format_its_file_names(tmp_path, suffix):
    path = render_search(lenet_search(), tmp_path / f"search.{suffix}")
    data = path.read_bytes()
    assert data.startswith(PNG) if suffix == "png" else b"<svg" in data[:2000]
    assert [p.name for p in tmp_path.iterdir()] == [f"search.{suffix}"]  # written atomically


def test_an_optcnn_search_has_no_chains_to_draw(tmp_path):
    result = lenet_search(space="optcnn")
    with pytest.raises(FlexFlowError, match="this search ran none"):
        render_search(result, tmp_path / "s.png")


def test_cli_search_plot(capsys, tmp_path):
    path = tmp_path / "search.png"
    argv = ["search", "lenet", "--machine", "p100:1", "--proposals", "200", "--quiet"]
    assert main([*argv, "--plot", str(path)]) == 0
    assert f"drawn in {path}" in capsys.readouterr().out
    assert path.read_bytes().startswith(PNG)
    with pytest.raises(SystemExit) as refused:  # a format it cannot write: argparse's usage error
        main([*argv, "--plot", str(tmp_path / "s.gif")])
    assert refused.value.code == 2
    assert "name the file .png, .svg or .pdf" in capsys.readouterr().err
    assert main([*argv[:4], "--space", "optcnn", "--plot", str(path)]) == 2
    assert "--plot would be ignored" in capsys.readouterr().err
