"""Legate starts on a host without an NVIDIA driver, with no manual step, and a real driver is never shadowed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flexflow
from flexflow.bootstrap import STUB_LOGGING, default_legate_config

VENV_BIN = Path(sys.executable).parent
NO_DRIVER = flexflow.LEGATE_SETUP.driver == "stand-in"
needs_stand_in = pytest.mark.skipif(not NO_DRIVER, reason="this host has a real CUDA driver")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEGATE_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str], timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize(
    "given, expected",
    [
        (None, f"--cpus 3 --gpus 0 --utility 1 --logging {STUB_LOGGING}"),
        ("--cpus 1", f"--cpus 1 --gpus 0 --logging {STUB_LOGGING}"),
        (
            "--gpus 0 --sysmem 256",
            f"--gpus 0 --sysmem 256 --cpus 3 --utility 1 --logging {STUB_LOGGING}",
        ),
        (
            "--cpus=2 --gpus=0 --logging legate=info",
            "--cpus=2 --gpus=0 --logging legate=info --utility 1",
        ),
        ("--cpus 3 --utility 2", f"--cpus 3 --utility 2 --gpus 0 --logging {STUB_LOGGING}"),
        ("--cpus x", f"--cpus x --gpus 0 --utility 1 --logging {STUB_LOGGING}"),
    ],
)
def test_default_config_completes_only_what_is_missing(given, expected):
    assert default_legate_config(given, cpus=3) == expected


LEGATE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import flexflow  # first: prepares the driver and Legate's configuration
    import cupynumeric as cn
    from legate.core import TaskTarget, get_legate_runtime

    a = cn.ones((64, 64))
    total = float((a @ a).sum())
    cpus = get_legate_runtime().machine.count(TaskTarget.CPU)
    print(json.dumps({"total": total, "cpus": cpus, "driver": flexflow.LEGATE_SETUP.driver}))
    """
)


def _last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.legate
@needs_stand_in
def test_plain_python_starts_legate_on_this_host_cores(tmp_path):
    script = tmp_path / "matmul.py"
    script.write_text(LEGATE_SCRIPT)
    proc = _run([sys.executable, str(script)], _clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = _last_json(proc.stdout)
    assert result == {"total": 64.0**3, "cpus": os.cpu_count(), "driver": "stand-in"}
    assert "CUDA" not in proc.stderr  # Realm's GPU-discovery warnings are silenced


@pytest.mark.legate
@needs_stand_in
def test_legate_launcher_flags_are_kept(tmp_path):
    script = tmp_path / "matmul.py"
    script.write_text(LEGATE_SCRIPT)
    proc = _run([str(VENV_BIN / "legate"), "--cpus", "1", "--gpus", "0", str(script)], _clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _last_json(proc.stdout) == {"total": 64.0**3, "cpus": 1, "driver": "stand-in"}


@needs_stand_in
def test_gpus_asked_for_on_a_host_without_a_driver_are_one_line_before_legate_starts():
    """Legate would end in 128 lines of traces with CUDA_ERROR_NO_DEVICE among them."""
    proc = _run([sys.executable, "-c", "import flexflow"], _clean_env(LEGATE_CONFIG="--gpus 1"))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "this run asks for --gpus 1, but this host has no CUDA driver" in proc.stderr


def test_a_rank_of_several_without_mpi_on_the_loader_path_says_what_to_set(monkeypatch):
    from flexflow.bootstrap import check_network_library
    from flexflow.errors import RuntimeSetupError

    def no_library(name, *args, **kwargs):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr("ctypes.CDLL", no_library)
    check_network_library({"OMPI_COMM_WORLD_SIZE": "1"})  # one rank: no network to start
    check_network_library({})
    with pytest.raises(
        RuntimeSetupError, match=r"one of 2 ranks.*needs libmpi\.so.*LD_LIBRARY_PATH="
    ):
        check_network_library({"MV2_COMM_WORLD_SIZE": "2"})


@pytest.mark.legate
def test_python_m_flexflow_runs(tmp_path):
    proc = _run([sys.executable, "-m", "flexflow", "info", "--json"], _clean_env())
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["driver"] == flexflow.LEGATE_SETUP.driver
    assert info["legate"] and info["nvidia-cupynumeric"]
    assert info["cpu_matrix_products"].split()[0] == ("mkl" if info["mkl"] else "numpy")
    assert info["cpp_step_tasks"].endswith("flexflow/lib/libflexflow_legate_tasks.so")  # built
    # cuPyNumeric's CUDA 12 wheels serve the GPU kernels; cuDNN only with the [gpu] extra
    assert info["gpu_kernels"].startswith("no GPU; CUDA 12: cudart, cublas, nvrtc")


@needs_stand_in
def test_a_real_driver_is_used_and_never_shadowed(tmp_path):
    """A `libcuda.so.1` the loader can find wins: no stand-in, and the user's config is left alone."""
    fake_real = tmp_path / "libcuda.so.1"
    shutil.copy(flexflow.LEGATE_SETUP.driver_path, fake_real)  # plays the part of a real driver
    code = "import flexflow, json, os; print(json.dumps([flexflow.LEGATE_SETUP.driver, os.environ.get('LEGATE_CONFIG')]))"
    proc = _run([sys.executable, "-c", code], _clean_env(LD_LIBRARY_PATH=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert _last_json(proc.stdout) == ["real", None]


@needs_stand_in
def test_auto_config_requested_by_the_user_is_respected():
    code = "import flexflow, json, os; print(json.dumps(os.environ.get('LEGATE_CONFIG')))"
    proc = _run([sys.executable, "-c", code], _clean_env(LEGATE_AUTO_CONFIG="0"))
    assert proc.returncode == 0, proc.stderr
    assert _last_json(proc.stdout) is None


def test_mpich_rank_count_is_passed_on_to_legate():
    from flexflow.bootstrap import _announce_mpich_ranks

    env = {"PMI_SIZE": "4"}
    _announce_mpich_ranks(env)
    assert env["MV2_COMM_WORLD_SIZE"] == "4"
    env = {"PMI_SIZE": "4", "OMPI_COMM_WORLD_SIZE": "2"}  # another launcher already said it
    _announce_mpich_ranks(env)
    assert "MV2_COMM_WORLD_SIZE" not in env
    env = {}
    _announce_mpich_ranks(env)
    assert env == {}


@pytest.mark.parametrize(
    "given, expected",
    [
        (None, "-lg:window 65536"),
        ("", "-lg:window 65536"),
        ("-lg:sched 4", "-lg:sched 4 -lg:window 65536"),
        ("-lg:window 512 -lg:sched 4", "-lg:window 512 -lg:sched 4"),  # the user's window
    ],
)
def test_legions_window_is_widened_unless_the_user_set_one(given, expected):
    from flexflow.bootstrap import legion_default_args

    assert legion_default_args(given) == expected


def test_importing_flexflow_widens_legions_window():
    code = "import flexflow, json, os; print(json.dumps(os.environ['LEGION_DEFAULT_ARGS']))"
    env = _clean_env()
    env.pop("LEGION_DEFAULT_ARGS", None)  # this process's import set it
    proc = _run([sys.executable, "-c", code], env)
    assert proc.returncode == 0, proc.stderr
    assert _last_json(proc.stdout) == "-lg:window 65536"


@pytest.mark.parametrize(
    "variable, value",
    [
        ("LEGION_DEFAULT_ARGS", '-lg:sched "4'),
        # flexflow completes LEGATE_CONFIG only where it stands in for the driver
        pytest.param("LEGATE_CONFIG", '--cpus "2', marks=needs_stand_in),
    ],
)
def test_badly_quoted_flags_are_refused_in_one_line(variable, value):
    env = _clean_env(**{variable: value})
    proc = _run([sys.executable, "-c", "import flexflow"], env)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert f"{variable} {value!r} cannot be split into flags" in proc.stderr
    assert "fix its quoting" in proc.stderr


def test_legion_args_with_bad_quoting_raise_a_setup_error():
    from flexflow.bootstrap import legion_default_args
    from flexflow.errors import RuntimeSetupError

    with pytest.raises(RuntimeSetupError, match="LEGION_DEFAULT_ARGS .* fix its quoting"):
        legion_default_args('-lg:sched "4')


def test_the_simulator_asks_the_runtime_what_it_runs_without_starting_legate():
    """flexflow.launches reads flexflow.runtime.native_step (which steps run as one C call, in
    C++ task bodies) and `flexflow info` reads flexflow.runtime.native_tasks; neither, nor the
    simulator, the planner and the profilers, may import Legate (a search runs without it; the
    step profiler's batch norms exchange statistics through flexflow.runtime.
    statistics_exchange, which once lived in the Legate-importing concurrent module)."""
    script = textwrap.dedent(
        """
        import sys
        import flexflow.launches, flexflow.planning, flexflow.simulator
        import flexflow.profiler, flexflow.step_profiler
        import flexflow.runtime.native_step, flexflow.runtime.native_tasks, flexflow.runtime.plan
        from flexflow.runtime import native_tasks
        native_tasks.built()
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("legate", "cupynumeric")))
        """
    )
    proc = _run([sys.executable, "-c", script], _clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
