"""Output files: checked before the work that writes them, written whole, streams and links kept."""

from __future__ import annotations

import os
import re
import stat
import tempfile
import time

import pytest

from flexflow.cli import main
from flexflow.errors import FlexFlowError, OutputPathError
from flexflow.figures import picture_format
from flexflow.fileio import atomic_write_text, check_output_path, check_outputs


def test_a_path_under_a_file_or_a_directory_is_refused_naming_it(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(OutputPathError, match=r"afile is a file, not a directory; choose"):
        check_output_path(tmp_path / "afile" / "sub" / "x.json")
    with pytest.raises(OutputPathError, match=r"is a directory; give a file name inside it"):
        atomic_write_text(tmp_path, "{}")
    assert check_output_path(tmp_path / "new" / "sub" / "x.json")  # made when written
    assert not (tmp_path / "new").exists()


def test_standard_output_and_devices_are_written_not_replaced(tmp_path, capfd):
    atomic_write_text("-", '{"a": 1}\n')
    assert capfd.readouterr().out == '{"a": 1}\n'
    atomic_write_text("/dev/null", "nothing")  # replaced by a regular file, as root, before
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_link_keeps_pointing_at_its_target_and_a_file_keeps_its_permissions(tmp_path):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    target.chmod(0o600)
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_pictures_take_their_format_from_the_suffix():
    assert [picture_format(p) for p in ("t.png", "t.SVG", "t.pdf", "t")] == [
        "png",
        "svg",
        "pdf",
        "png",
    ]
    with pytest.raises(OutputPathError, match=r"t.gif: pictures are written as png, svg, pdf"):
        picture_format("t.gif")


@pytest.mark.parametrize(
    "args, message",
    [
        (["search", "lenet", "--machine", "p100:1", "--budget", "30", "--export", "{f}/best.json"],
         "afile is a file, not a directory"),
        (["simulate", "lenet", "--machine", "p100:1", "--timeline-png", "{f}/t.png"],
         "afile is a file, not a directory"),
        (["simulate", "lenet", "--machine", "p100:1", "--trace", "{d}"], "is a directory"),
        (["profile", "lenet", "--machine", "local", "--out", "{f}/p.json"],
         "afile is a file, not a directory"),
        (["graph", "lenet", "--png", "{d}/g.gif"], "name the file .png"),
    ],
)  # fmt: skip
def test_a_bad_output_path_stops_the_command_before_its_work(tmp_path, capsys, args, message):
    """A 30 s search ended in 'File exists: afile' and lost its result."""
    (tmp_path / "afile").write_text("x")
    args = [a.format(f=tmp_path / "afile", d=tmp_path) for a in args]
    begin = time.perf_counter()
    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2 and time.perf_counter() - begin < 5
    err = " ".join(capsys.readouterr().err.split())
    assert message in err, err


def test_graph_json_goes_to_standard_output_with_a_dash(capfd):
    assert main(["graph", "lenet", "--json", "-"]) == 0
    assert '"ops"' in capfd.readouterr().out


def test_a_failed_write_names_the_file_asked_for_and_leaves_it_as_it_was(tmp_path, monkeypatch):
    """An immutable checkpoint's failed save named the temporary file (.imm.npz.vdoaq4a_.tmp)."""
    path = tmp_path / "c.npz"
    path.write_text("old")

    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match=r"not written; the file is as it was") as info:
        atomic_write_text(path, "new")
    assert info.value.filename == str(path) and path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]


def test_a_directory_refusing_the_temporary_file_names_the_file_asked_for(tmp_path, monkeypatch):
    """The temporary file beside it could not be made: the error named that file instead."""

    def refuse(*_, **__):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OSError, match=r"Permission denied \(not written") as info:
        atomic_write_text(tmp_path / "x.json", "new")
    assert info.value.filename == str(tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "make, argv, message",
    [
        (  # the user's model file: its code would be lost
            "model.py",
            ["search", "{t}/model.py", "--machine", "p100:1", "--export", "{t}/model.py"],
            r"--export .*model\.py is the model file this run reads",
        ),
        (
            "machine.json",
            ["simulate", "lenet", "--machine", "{t}/machine.json", "--trace", "{t}/machine.json"],
            r"--trace .*machine\.json is the --machine file this run reads",
        ),
        (
            "profile.json",
            ["simulate", "lenet", "--machine", "p100:1", "--profile", "{t}/profile.json",
             "--taskgraph", "{t}/profile.json"],
            r"--taskgraph .*profile\.json is the --profile file this run reads",
        ),
        (  # the exported strategy was replaced by the picture
            None,
            ["search", "lenet", "--machine", "p100:1", "--export", "{t}/x.png", "--plot",
             "{t}/x.png"],
            r"--export and --plot both name .*x\.png; the later write would replace the other",
        ),
        (
            None,
            ["simulate", "lenet", "--machine", "p100:1", "--trace", "{t}/a/../y.png",
             "--timeline-png", "{t}/y.png"],
            r"--trace and --timeline-png both name",
        ),
    ],
)  # fmt: skip
def test_an_output_over_another_output_or_over_a_file_the_run_reads_is_refused(
    tmp_path, capsys, make, argv, message
):
    (tmp_path / "a").mkdir()
    machine = '{"name": "m", "nodes": 1, "devices_per_node": 2, "device": "p100"}'
    model = "def build(model):\n    model.softmax(model.dense(model.create_tensor((8, 4)), 2))\n"
    sources = {"model.py": model, "machine.json": machine, "profile.json": "{}"}
    if make is not None:
        (tmp_path / make).write_text(sources[make])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert main([a.format(t=tmp_path) for a in argv]) == 2
    assert re.search(message, " ".join(capsys.readouterr().err.split()))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_check_outputs_tells_apart_outputs_reads_and_standard_output(tmp_path):
    (tmp_path / "m.py").write_text("")
    check_outputs({"--a": tmp_path / "a", "--b": tmp_path / "b", "--c": None, "--d": "-"})
    check_outputs({"--a": tmp_path / "m.py"}, {"the model file": "lenet"})  # a name, not a file
    with pytest.raises(FlexFlowError, match="--a and --b would both write to standard output"):
        check_outputs({"--a": "-", "--b": "-"})
    with pytest.raises(FlexFlowError, match="--a and --json would both write"):
        check_outputs({"--a": "-"}, report="--json")
    with pytest.raises(FlexFlowError, match="is the model file this run reads"):
        check_outputs(
            {"--a": tmp_path / "x" / ".." / "m.py"}, {"the model file": tmp_path / "m.py"}
        )


@pytest.mark.parametrize(
    "path, message",
    [
        ("", "an empty path; give a file name (e.g. out.json)"),
        ("{t}/out.json/", "ends with /, naming a directory"),  # it wrote out.json
    ],
)
def test_an_empty_path_or_one_ending_with_a_slash_is_refused(tmp_path, path, message):
    with pytest.raises(OutputPathError, match=re.escape(message)):
        check_output_path(path.format(t=tmp_path))
    with pytest.raises(SystemExit):  # and through a command: before any work, nothing written
        main(["simulate", "lenet", "--machine", "p100:1", "--trace", path.format(t=tmp_path)])
    assert list(tmp_path.iterdir()) == []
