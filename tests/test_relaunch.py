"""Launcher flags after a script's name (`flexflow.relaunch`)."""

from __future__ import annotations

import pytest

from flexflow.errors import FlexFlowError
from flexflow.relaunch import RELAUNCHED, relaunch_with_launcher_flags, split_launcher_flags


def test_the_launcher_flags_are_taken_out_with_their_values_and_the_rest_kept_in_order():
    argv = ["--model", "lenet", "--cpus", "2", "--epochs", "1", "--gpus=0", "--nodes", "4"]
    assert split_launcher_flags(argv) == (
        ["--cpus", "2", "--gpus=0", "--nodes", "4"],
        ["--model", "lenet", "--epochs", "1"],
    )


def test_the_scripts_own_flags_of_driver_names_and_everything_after_a_double_dash_stay():
    # the driver's --profile is a flag; train.py's --profile takes a file
    argv = ["--profile", "p.json", "--", "--cpus", "2"]
    assert split_launcher_flags(argv) == ([], argv)


def test_a_flag_without_its_value_is_one_clear_error():
    with pytest.raises(FlexFlowError, match="--cpus needs a value"):
        split_launcher_flags(["--model", "lenet", "--cpus"])


def test_arguments_without_launcher_flags_run_here():
    assert relaunch_with_launcher_flags("train.py", ["--model", "lenet"]) == ["--model", "lenet"]


def test_a_relaunched_process_given_launcher_flags_again_stops(monkeypatch):
    monkeypatch.setenv(RELAUNCHED, "1")
    with pytest.raises(FlexFlowError, match="put them before the script"):
        relaunch_with_launcher_flags("train.py", ["--cpus", "2"])


def test_launcher_flags_run_the_legate_driver_with_them_before_the_script(monkeypatch):
    ran = []
    monkeypatch.setenv(RELAUNCHED, "")  # unset here; restored after, though the relaunch sets it
    monkeypatch.setattr("flexflow.relaunch.legate_driver", lambda: "/venv/bin/legate")
    monkeypatch.setattr("os.execv", lambda path, command: ran.append((path, command)))
    with pytest.raises(AssertionError, match="unreachable"):  # execv replaced the process
        relaunch_with_launcher_flags("train.py", ["--model", "lenet", "--cpus", "2"])
    assert ran == [
        ("/venv/bin/legate", ["/venv/bin/legate", "--cpus", "2", "train.py", "--model", "lenet"])
    ]
