"""The `flexflow` command: model listing, summaries, graph export, and one-line errors with exit 2."""

from __future__ import annotations

import json
import re

import pytest

from flexflow.cli import main
from tests.foreground import start_foreground

PUBLISHED_PARAMETERS = {
    "alexnet": 61_100_840,  # torchvision.models.alexnet
    "inception_v3": 23_834_568,  # torchvision inception_v3 without the auxiliary head
    "resnet101": 44_549_160,  # torchvision.models.resnet101
    "lenet": 431_080,  # Caffe's MNIST LeNet
}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_json_lists_the_eight_models_with_published_counts(capsys):
    code, out, _ = run(capsys, "models", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)}
    assert set(rows) == {
        "alexnet",
        "inception_v3",
        "resnet101",
        "rnntc",
        "rnnlm",
        "nmt",
        "lenet",
        "transformer",
    }
    for name, count in PUBLISHED_PARAMETERS.items():
        assert rows[name]["parameters"] == count
    assert rows["alexnet"]["batch_size"] == 256 and rows["nmt"]["batch_size"] == 64
    # ResNet-101: ~7.8 GMACs per 224x224 image forward, backward about twice that, batch 64
    assert 2.9e3 < rows["resnet101"]["gflops_per_iteration"] < 3.1e3
    assert all(row["ops"] > 0 for row in rows.values())


def test_models_table(capsys):
    code, out, _ = run(capsys, "models")
    assert code == 0 and "inception_v3" in out and "23,834,568" in out


def test_summary_of_a_user_model_file(capsys, tmp_path):
    path = tmp_path / "mlp.py"
    path.write_text(
        "def build(model):\n"
        "    x = model.create_tensor((model.config.batch_size, 20))\n"
        "    model.softmax(model.dense(model.dense(x, 30, name='hidden'), 4, name='out'))\n"
    )
    code, out, _ = run(capsys, "summary", str(path), "--batch-size", "8")
    assert code == 0 and "hidden" in out and "(8, 30)" in out
    code, out, _ = run(capsys, "summary", str(path), "--json")
    assert json.loads(out)["parameters"] == 20 * 30 + 30 + 30 * 4 + 4


def test_graph_export(capsys, tmp_path):
    code, out, _ = run(
        capsys,
        "graph",
        "lenet",
        "--json",
        str(tmp_path / "g.json"),
        "--dot",
        str(tmp_path / "g.dot"),
        "--png",
        str(tmp_path / "g.png"),
    )
    assert code == 0, out
    assert json.loads((tmp_path / "g.json").read_text())["format"] == "flexflow-operator-graph"
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv, match",
    [
        (["summary", "vgg"], "unknown model 'vgg'"),
        (["summary", "/nowhere/model.py"], "/nowhere/model.py"),
        (["graph", "lenet"], "nothing to write"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, match):
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("flexflow: error:") and match in err
    assert "Traceback" not in err


def test_bad_batch_size_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["summary", "lenet", "--batch-size", "0"])
    assert info.value.code == 2
    assert "expected a positive integer, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "lenet", "--machine", "p100:1", "--seed", "-1"],
        ["exhaustive", "lenet", "--machine", "p100:1", "--seed", "-2"],
        ["strategy", "lenet", "--machine", "p100:1", "--name", "random", "--seed", "-3"],
        ["simulate", "lenet", "--machine", "p100:1", "--strategy", "random", "--seed", "x"],
    ],
)
def test_a_negative_seed_is_a_usage_error(capsys, argv):
    """numpy's generators take seeds >= 0: a usage error, not numpy's traceback."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "argument --seed: expected an integer >= 0" in capsys.readouterr().err


def test_strategy_export_then_check(capsys, tmp_path):
    path = tmp_path / "s.json"
    code, out, _ = run(
        capsys,
        "strategy",
        "inception_v3",
        "--machine",
        "k80:4",
        "--name",
        "expert",
        "--export",
        str(path),
        "--quiet",
    )
    assert code == 0 and path.exists()
    code, out, _ = run(
        capsys, "strategy", "inception_v3", "--machine", "k80:4", "--check", str(path), "--quiet"
    )
    assert code == 0 and "valid for inception_v3 on k80:4" in " ".join(out.split())


def test_strategy_check_lists_every_problem_and_exits_2(capsys, tmp_path):
    path = tmp_path / "s.json"
    run(capsys, "strategy", "lenet", "--machine", "p100:1", "--name", "dp", "--export", str(path))
    # the file, checked against the same model built with a batch of 6: degree 4 no longer divides
    code, _, err = run(
        capsys,
        "strategy",
        "lenet",
        "--machine",
        "p100:1",
        "--check",
        str(path),
        "--batch-size",
        "6",
    )
    assert code == 2
    assert (
        "problem(s)" in err
        and "conv2d 'conv1': degree 4 on dimension 'sample' does not divide its size 6" in err
    )


def test_strategy_needs_a_name_or_a_file(capsys):
    with pytest.raises(SystemExit) as info:
        main(["strategy", "lenet", "--machine", "p100:1"])
    assert info.value.code == 2
    assert "one of the arguments --name --check is required" in capsys.readouterr().err


def test_space_lists_configurations_per_op(capsys):
    code, out, _ = run(capsys, "space", "lenet", "--machine", "p100:1", "--json")
    assert code == 0
    data = json.loads(out)
    flat = next(r for r in data["ops"] if r["op"] == "flat")
    # (64, 800), sample only: degrees 1, 2, 4 with 4, 3 and 1 device blocks
    assert flat["partitionable"] == ["sample"] and flat["configurations"] == 4 + 3 + 1
    assert data["log10_strategies"] > 9


def test_simulate_json_trace_and_taskgraph(capsys, tmp_path):
    trace, taskgraph = tmp_path / "trace.json", tmp_path / "tg.json"
    code, out, _ = run(
        capsys,
        "simulate",
        "rnnlm",
        "--machine",
        "p100:1",
        "--strategy",
        "expert",
        "--json",
        "--trace",
        str(trace),
        "--taskgraph",
        str(taskgraph),
    )
    assert code == 0
    result = json.loads(out)
    for key in (
        "iteration_ms",
        "compute_ms_total",
        "comm_bytes_total",
        "peak_memory_bytes",
        "num_tasks",
    ):
        assert key in result
    assert len(result["peak_memory_bytes"]) == 4 and result["iteration_ms"] > 0
    events = json.loads(trace.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"n0.gpu0", "n0.gpu3"} <= tracks and any("nvlink" in t for t in tracks)
    tasks = json.loads(taskgraph.read_text())["tasks"]
    assert len(tasks) == result["num_tasks"] > 0  # zero-time barriers left out of both
    by_id = {t["id"]: t for t in tasks}
    for (
        t
    ) in tasks:  # the timeline is consistent: every predecessor ends before its successor starts
        assert t["kind"] in ("compute", "update", "comm")
        assert all(by_id[p]["end_ms"] <= t["start_ms"] + 1e-9 for p in t["predecessors"])
        assert t["end_ms"] == pytest.approx(t["start_ms"] + t["duration_ms"])
    assert max(t["end_ms"] for t in tasks) == pytest.approx(result["iteration_ms"])


def test_a_trace_slices_task_is_the_task_graphs_of_that_id(capsys, tmp_path):
    """LeNet's expert strategy has barriers among its tasks, which the files leave out."""
    trace, taskgraph = tmp_path / "trace.json", tmp_path / "tg.json"
    code, _, _ = run(capsys, "simulate", "lenet", "--machine", "p100:1", "--strategy", "expert",
                     "--trace", str(trace), "--taskgraph", str(taskgraph))  # fmt: skip
    assert code == 0
    by_id = {t["id"]: t for t in json.loads(taskgraph.read_text())["tasks"]}
    slices = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {e["args"]["task"] for e in slices} == set(by_id)
    for event in slices:  # the same name, start and duration
        task = by_id[event["args"]["task"]]
        assert event["name"] == task["name"]
        assert event["ts"] == pytest.approx(task["start_ms"] * 1e3)
        assert event["dur"] == pytest.approx(task["duration_ms"] * 1e3)


def test_fused_launches_model_the_runtime(capsys):
    args = ("lenet", "--machine", "p100:1", "--strategy", "dp", "--json")
    times = []
    for extra in ((), ("--fused-launches",)):
        code, out, _ = run(capsys, "simulate", *args, *extra)
        assert code == 0
        times.append(json.loads(out)["iteration_ms"])
    # data parallel LeNet fuses into one task per GPU: 7 of its 8 ops launch nothing (10 us
    # each, forward and backward), some of it on the critical path
    assert times[0] - 7 * 2 * 10e-3 <= times[1] < times[0]
    code, out, _ = run(capsys, "check-local", *args, "--fused-launches")
    assert code == 0 and json.loads(out)["iteration_ms"] == pytest.approx(times[1])


def test_fused_launches_on_cpus_charge_the_runtime_per_legate_task(capsys, tmp_path, monkeypatch):
    from flexflow.cost import LEGATE_CPP_TASK_S, LEGATE_CPU_TASK_S
    from flexflow.ops import blas

    monkeypatch.setenv("LEGATE_CONFIG", "--cpus 2 --gpus 0")
    if blas.sgemm_address() is not None:  # its steps one C call each, in C++ bodies, 8 a launch
        code, out, _ = run(capsys, "simulate", "lenet", "--machine", "local", "--json",
                           "--fused-launches", "--strategy", "dp")  # fmt: skip
        assert json.loads(out)["runtime_ms"] == pytest.approx(2 * LEGATE_CPP_TASK_S * 1e3 / 8)
    taskgraph = tmp_path / "tg.json"
    # under mean squared error the steps run Python bodies
    args = (
        "lenet",
        "--machine",
        "local",
        "--json",
        "--fused-launches",
        "--loss",
        "mean_squared_error",
    )
    trace, png = tmp_path / "trace.json", tmp_path / "timeline.png"
    code, out, _ = run(capsys, "simulate", *args, "--strategy", "dp", "--taskgraph", str(taskgraph),
                       "--trace", str(trace), "--timeline-png", str(png))  # fmt: skip
    assert code == 0 and png.stat().st_size > 0
    result = json.loads(out)
    # data parallel LeNet is one step task per CPU processor (flexflow.launches)
    assert result["runtime_ms"] == pytest.approx(2 * LEGATE_CPU_TASK_S * 1e3)
    exported = json.loads(taskgraph.read_text())
    tasks = exported["tasks"]
    end = max(t["end_ms"] for t in tasks)
    work = sum(t["duration_ms"] for t in tasks if t["kind"] in ("compute", "update"))
    bound = (work + result["runtime_ms"]) / exported["cores"]
    assert result["iteration_ms"] == pytest.approx(max(end, bound))
    # the trace shows any time the cores' work adds as a track of its own, after the tasks
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("cat") == "runtime"]
    assert len(events) == (bound > end)
    for event in events:
        assert event["ts"] == pytest.approx(end * 1e3)
        assert event["ts"] + event["dur"] == pytest.approx(result["iteration_ms"] * 1e3)
    code, out, _ = run(capsys, "simulate", *args, "--strategy", "model")
    assert code == 0 and json.loads(out)["runtime_ms"] > result["runtime_ms"]


def test_simulate_rejects_a_bad_strategy_file(capsys, tmp_path):
    path = tmp_path / "s.json"
    path.write_text('{"format": "flexflow-strategy", "version": 1, "ops": [')
    code, _, err = run(capsys, "simulate", "lenet", "--machine", "p100:1", "--strategy", str(path))
    assert code == 2 and "malformed or truncated" in err


@pytest.mark.parametrize("command", ["simulate", "check-local"])
def test_a_misspelt_strategy_name_names_the_choices(capsys, command):
    code, _, err = run(capsys, command, "lenet", "--machine", "p100:1", "--strategy", "exprt")
    assert code == 2
    assert "strategy 'exprt' is neither a name (dp, expert, model, random, dp-width, " in err


def test_simulate_takes_the_search_inits_names(capsys):
    """dp-width and optcnn are strategies too: what `search --init` starts from."""
    args = ("simulate", "lenet", "--machine", "p100:1", "--json")
    results = {}
    for name in ("dp", "dp-width", "optcnn"):
        code, out, _ = run(capsys, *args, "--strategy", name)
        assert code == 0
        results[name] = json.loads(out)["iteration_ms"]
    assert results["dp-width"] <= results["dp"]  # DP on all 4 is one of the widths tried


def test_fused_launches_price_the_runs_loss_and_steps_per_launch(capsys, tmp_path, monkeypatch):
    """With --fused-launches, `simulate` and `search` model the training run as planning does:
    sparse cross-entropy runs a dense chain's data-parallel steps in C++ task bodies, K steps
    per launch (`flexflow.launches`); other losses keep Python bodies. A bad value exits 2."""
    from flexflow.cost import LEGATE_CPP_TASK_S, LEGATE_CPU_TASK_S
    from flexflow.ops import blas

    monkeypatch.setenv("LEGATE_CONFIG", "--cpus 2 --gpus 0")
    path = tmp_path / "mlp.py"
    path.write_text(
        "from flexflow import ActiMode\n"
        "def build(model):\n"
        "    x = model.create_tensor((model.config.batch_size, 20))\n"
        "    x = model.dense(x, 30, ActiMode.AC_MODE_RELU)\n"
        "    model.softmax(model.dense(x, 4))\n"
    )
    args = (str(path), "--machine", "local", "--strategy", "dp", "--json", "--fused-launches")
    runtime = {}
    for extra in ((), ("--steps-per-execution", "1"), ("--loss", "mse")):
        code, out, _ = run(capsys, "simulate", *args, *extra)
        assert code == 0
        runtime[extra] = json.loads(out)["runtime_ms"]
    per_task = LEGATE_CPP_TASK_S if blas.sgemm_address() is not None else LEGATE_CPU_TASK_S
    per_launch = 8 if blas.sgemm_address() is not None else 1
    assert runtime[()] == pytest.approx(2 * per_task / per_launch * 1e3)
    assert runtime[("--steps-per-execution", "1")] == pytest.approx(2 * per_task * 1e3)
    assert runtime[("--loss", "mse")] == pytest.approx(2 * LEGATE_CPU_TASK_S * 1e3)
    for bad in (("--loss", "hinge"), ("--steps-per-execution", "0")):
        with pytest.raises(SystemExit) as exit_:
            main(["simulate", *args, *bad])
        assert exit_.value.code == 2 and f"argument {bad[0]}" in capsys.readouterr().err


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_ends_a_search_with_one_line_and_no_file(tmp_path, workers):
    """As a terminal's Ctrl-C does: SIGINT to the command's process group (its chain workers
    too), once the search is under way. Exit 130, one line, no traceback, no export."""
    import os
    import signal
    import sys
    import time

    export = tmp_path / "best.json"
    command = [sys.executable, "-m", "flexflow", "search", "nmt", "--machine", "p100:4",
               "--budget", "60", "--workers", workers, "--quiet", "--export", str(export)]  # fmt: skip
    proc = start_foreground(command)
    time.sleep(6)  # past the set-up: the chains run
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "flexflow: interrupted" in err and "Traceback" not in err
    assert not export.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGKILL"])
def test_a_search_killed_leaves_no_worker_behind(tmp_path, signum):
    """`kill PID` (a scheduler's SIGTERM) or SIGKILL to the search's process alone: a chain
    worker lived on, orphaned, holding memory and the caller's stdout pipe (helper's run)."""
    import os
    import signal
    import sys
    import time

    command = [sys.executable, "-m", "flexflow", "search", "nmt", "--machine", "p100:4",
               "--budget", "60", "--workers", "2", "--quiet"]  # fmt: skip
    proc = start_foreground(command)
    time.sleep(6)  # past the set-up: the chains run
    os.kill(proc.pid, getattr(signal, signum))
    _, err = proc.communicate(timeout=60)  # EOF: no worker holds the pipes any more
    if signum == "SIGTERM":
        assert proc.returncode == 130 and "flexflow: interrupted" in err, err[-3000:]
    deadline = time.monotonic() + 10
    while True:
        try:
            os.killpg(proc.pid, 0)  # a process of the search's group is alive
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "a worker outlived the search"
        time.sleep(0.2)


def test_a_faster_neighbour_pasted_into_the_strategy_file_simulates_to_its_listed_time(
    capsys, tmp_path
):
    path = tmp_path / "dp.json"
    args = ("lenet", "--machine", "p100:1")
    code, _, _ = run(capsys, "strategy", *args, "--name", "dp", "--export", str(path))
    assert code == 0
    code, out, _ = run(capsys, "check-local", *args, "--strategy", str(path), "--json")
    neighbours = json.loads(out)["improving_neighbours"]
    assert code == 0 and neighbours  # data parallelism is not locally optimal on LeNet
    for neighbour in neighbours[:3]:
        data = json.loads(path.read_text())
        entry = neighbour["strategy_entry"]
        data["ops"] = [entry if op["name"] == entry["name"] else op for op in data["ops"]]
        changed = tmp_path / "changed.json"
        changed.write_text(json.dumps(data))
        code, out, _ = run(capsys, "simulate", *args, "--strategy", str(changed), "--json")
        assert code == 0
        assert json.loads(out)["iteration_ms"] == pytest.approx(neighbour["iteration_ms"])


def test_simulate_says_when_a_strategy_would_not_fit_in_memory(capsys):
    """It printed a 37.67 GiB peak for 12 GiB K80s without a word."""
    import json

    args = ["simulate", "alexnet", "--machine", "k80:1", "--strategy", "dp", "--json"]
    assert main([*args, "--batch-size", "65536"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["over_memory"] == ["n0.gpu0", "n0.gpu1", "n0.gpu2", "n0.gpu3"]
    assert "would not fit; use a smaller --batch-size" in " ".join(err.split())
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["over_memory"] == [] and "would not fit" not in err


def test_search_says_when_its_strategy_would_not_fit_in_memory(capsys):
    """The search prices time only: it returned a strategy simulate says would not fit,
    without a word (a helper's machine file gave a GPU 1 byte; here the batch is too big)."""
    import json

    args = ["search", "lenet", "--machine", "p100:1", "--proposals", "20", "--no-polish"]
    assert main([*args, "--batch-size", "1048576", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["over_memory"]  # the devices, by name
    assert "would not fit; use a smaller --batch-size" in " ".join(err.split())
    assert main([*args, "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["over_memory"] == [] and "would not fit" not in err


def test_an_output_on_standard_output_gets_it_alone(capsys):
    """`-` writes the file to stdout and the command's messages to stderr, so a pipe gets
    valid JSON; two outputs on stdout are refused before any work."""
    code, out, err = run(capsys, "graph", "lenet", "--json", "-")
    assert code == 0
    assert json.loads(out)["ops"] and "lenet: 8 ops -> -" in err
    code, out, err = run(
        capsys, "strategy", "lenet", "--machine", "p100:1", "--name", "dp", "--export", "-"
    )
    assert code == 0 and json.loads(out)["model"] == "lenet" and "strategy 'dp'" in err
    code, out, err = run(capsys, "simulate", "lenet", "--machine", "p100:1", "--trace", "-")
    assert code == 0 and json.loads(out) and "ms per iteration" in err
    argv = ["simulate", "lenet", "--machine", "p100:1", "--taskgraph", "-", "--json"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert "--taskgraph and --json would both write to standard output" in err
    argv = ["simulate", "lenet", "--machine", "p100:1", "--timeline-png", "-", "--json"]
    code, out, err = run(capsys, *argv)
    assert code == 2 and "--timeline-png and --json would both" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "lenet", "--budget", "inf"], "--budget inf never ends"),
        (["exhaustive", "resnet101"], r"about 10\^353 strategies .* give a budget"),
        (["search", "lenet", "--space", "optcnn", "--init", "dp"], "--init would be ignored"),
        (["search", "lenet", "--space", "optcnn", "--proposals", "9"], "--proposals would be"),
        (["search", "lenet", "--space", "optcnn", "--budget", "inf"], "--budget would be"),
        (["search", "lenet", "--space", "optcnn", "--workers", "1"], "--workers would be"),
        (
            ["search", "lenet", "--space", "optcnn", "--beta", "9", "--no-polish"],
            "--beta, --no-polish would be ignored",
        ),
        (["search", "lenet", "--no-polish", "--polish-budget", "3"], "which --no-polish skips"),
        (["simulate", "lenet", "--loss", "mse"], "--loss matter only with --fused-launches"),
        (["search", "lenet", "--steps-per-execution", "2"], "--steps-per-execution matter only"),
    ],
)
def test_flags_that_would_be_ignored_or_never_end_are_refused(capsys, argv, message):
    code, out, err = run(capsys, *argv[:2], "--machine", "p100:1", *argv[2:])
    assert code == 2 and out == ""
    assert re.search(message, err), err


def test_a_search_with_an_unbounded_time_stops_at_its_proposals(capsys):
    argv = ["search", "lenet", "--machine", "p100:1", "--budget", "inf", "--proposals", "40"]
    code, out, _ = run(capsys, *argv, "--no-polish", "--json")
    assert code == 0 and 0 < json.loads(out)["proposals"] <= 40  # chains may stop sooner


def test_init_may_repeat_and_its_lists_add_up(capsys):
    argv = ["search", "lenet", "--machine", "p100:1", "--proposals", "60", "--no-polish", "--json"]
    code, out, _ = run(capsys, *argv, "--init", "dp", "--init", "expert,random")
    assert code == 0
    assert [c["init"] for c in json.loads(out)["chains"]] == ["dp", "expert", "random"]


def test_a_strategy_file_for_another_machine_is_a_one_line_warning(capsys, tmp_path):
    path = str(tmp_path / "s.json")
    run(capsys, "strategy", "lenet", "--machine", "p100:1", "--name", "dp", "--export", path)
    code, out, err = run(capsys, "simulate", "lenet", "--machine", "k80:1", "--strategy", path)
    assert code == 0 and "ms per iteration" in out
    assert err.startswith("flexflow: warning: strategy file") and err.count("\n") == 1, err
    argv = ["search", "lenet", "--machine", "k80:1", "--init", path, "--proposals", "20"]
    code, out, err = run(capsys, *argv, "--quiet")  # a chain's start: the search adapts it
    assert code == 0 and "warning" not in err


def test_a_checked_strategy_file_can_be_exported_again(capsys, tmp_path):
    source, again = tmp_path / "s.json", tmp_path / "again.json"
    argv = ["strategy", "lenet", "--machine", "p100:1"]
    assert run(capsys, *argv, "--name", "expert", "--export", str(source))[0] == 0
    code, _, _ = run(capsys, *argv, "--check", str(source), "--export", str(again), "--quiet")
    assert code == 0 and json.loads(again.read_text()) == json.loads(source.read_text())


def test_exhaustive_refuses_a_negative_seed_chain(capsys):
    with pytest.raises(SystemExit):
        main(["exhaustive", "lenet", "--machine", "p100:1", "--seed-proposals", "-5"])
    assert "expected an integer >= 0, got -5" in capsys.readouterr().err


@pytest.mark.parametrize("json_flag", [["--json"], []])
def test_output_piped_to_a_reader_that_goes_ends_quietly(json_flag):
    """`flexflow summary resnet101 --json | head -1`: the reader closes the pipe; the command
    ends with exit 1 and nothing on stderr (it printed 'flexflow: error: Broken pipe', exit 2),
    the JSON printed by print() and the table by rich's console alike."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader has gone before the first line
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "flexflow", "summary", "resnet101", *json_flag],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (1, "")


def test_a_broken_pipe_other_than_standard_output_is_reported(capsys):
    """A scan worker's pipe that broke (the worker killed for memory) ended the command
    silently with exit 1, as if the reader of its output had gone."""
    import argparse
    import os

    from rich.console import Console

    from flexflow.cli import _run

    read, write = os.pipe()
    os.close(read)

    def handler(args, console) -> int:
        os.write(write, b"a task")  # no reader: BrokenPipeError
        return 0

    try:
        code = _run(argparse.Namespace(handler=handler), Console())
    finally:
        os.close(write)
    assert (code, capsys.readouterr().err) == (2, "flexflow: error: Broken pipe\n")
