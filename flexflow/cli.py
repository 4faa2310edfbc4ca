"""The `flexflow` command (also `python -m flexflow`): one subcommand per job, bad input -> one line and exit 2.

Here: the parser, `flexflow info` and the run of a subcommand (its errors as one line and an
exit code). The subcommands are `cli_inspect` (models, summary, graph, machines),
`cli_strategy` (strategy, space), `cli_simulate` (simulate, profile) and `cli_search` (search,
exhaustive, check-local); the arguments they share are `cli_args`'.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Sequence

from rich.console import Console

from flexflow import cli_inspect, cli_simulate, cli_strategy
from flexflow.errors import FlexFlowError, FlexFlowWarning, one_line_warnings
from flexflow.figures import picture_file
from flexflow.fileio import check_outputs, output_file

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
"""The shell's code for a command ended by SIGINT (128 + 2)."""
EXIT_BROKEN_PIPE = 1
"""A command whose output's reader went away (`flexflow summary resnet101 --json | head`) ends
quietly with it: what Python's documentation advises, and what rich's console does when the
reader of its tables goes."""


def cmd_info(args: argparse.Namespace, console: Console) -> int:
    """How this process was prepared for Legate (driver, configuration) and the versions in use."""
    from importlib.metadata import PackageNotFoundError, version

    import flexflow

    info: dict[str, object] = {
        "driver": flexflow.LEGATE_SETUP.driver,
        "driver_library": flexflow.LEGATE_SETUP.driver_path,
        "legate_config": flexflow.LEGATE_SETUP.legate_config,
    }
    for package in ("legate", "nvidia-cupynumeric", "numpy", "cffi", "mkl"):
        try:
            info[package] = version(package)
        except PackageNotFoundError:
            info[package] = None
    from flexflow.ops import blas
    from flexflow.runtime import native_tasks

    info["cpu_matrix_products"] = blas.provider()  # MKL's GEMM, or numpy's without MKL
    # the step tasks with C++ bodies (flexflow.runtime.native_tasks)
    info["cpp_step_tasks"] = str(native_tasks.LIBRARY) if native_tasks.built() else "not built"
    from flexflow.gpu import libraries

    info["gpu_kernels"] = libraries.summary()  # the CUDA release and libraries they would use
    if args.json:
        print(json.dumps(info, indent=1))
    else:
        for key, value in info.items():
            console.print(f"{key:>20}: {value}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flexflow",
        description="SOAP parallelization search and training on Legate (FlexFlow, SysML 2019).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace, Console], int], help: str):
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(handler=handler)
        return sub

    from flexflow import cli_search  # the search's modules load when the parser is built

    for subcommands in (cli_inspect, cli_strategy, cli_simulate, cli_search):
        subcommands.register(add)

    info = add(
        "info", cmd_info, "show how Legate is configured for this host and the versions in use"
    )
    info.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def _terminated(signum: int, frame) -> None:
    """SIGTERM (a job scheduler's, `kill`): leave as Ctrl-C does, through the cleanup that
    stops the search's worker processes."""
    raise KeyboardInterrupt


def output_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Every subcommand's flags naming an output file (or picture), by destination: `-` sends
    them to standard output."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(output_flags(sub))
        elif action.type in (output_file, picture_file):
            found[action.dest] = action.option_strings[-1]
    return found


READS = {"the model file": "model", "the --machine file": "machine",
         "the --profile file": "profile", "the --strategy file": "strategy",
         "the --check file": "check"}  # fmt: skip
"""What a command reads, by Namespace dest: no output may replace it (`check_outputs`)."""
REWRITES = frozenset({("--export", "the --check file")})
"""`strategy --check F --export F` writes the checked strategy back."""


def _console_for(args: argparse.Namespace, outputs: dict[str, str]) -> Console:
    """The console for the command's messages: stderr when an output file is standard output
    (`-`), so what is piped is that file alone. Outputs on one file (standard output included)
    or over a file the command reads (a model or machine file, a profile) are an error."""
    given = {  # a dest another subcommand uses for a switch (--json) holds a bool here
        flag: value
        for dest, flag in outputs.items()
        if isinstance(value := getattr(args, dest, None), str | os.PathLike)
    }
    reads = {what: value for what, dest in READS.items()
             if isinstance(value := getattr(args, dest, None), str)}  # fmt: skip
    report = "--json" if getattr(args, "json", None) is True else None  # a command's report
    to_stdout = check_outputs(given, reads, report, REWRITES)
    return Console(soft_wrap=True, stderr=bool(to_stdout))  # one line per message, for grep


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        console = _console_for(args, output_flags(parser))
    except FlexFlowError as exc:
        print(f"flexflow: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if threading.current_thread() is not threading.main_thread():  # no signals there
        return _run(args, console)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _run(args, console)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, console: Console) -> int:
    """The command's handler, its errors reported as one line and an exit code."""
    try:
        with one_line_warnings():
            return args.handler(args, console)
    except (FlexFlowError, FlexFlowWarning) as exc:  # a warning too, where -W error makes it one
        print(f"flexflow: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        broken = isinstance(exc, BrokenPipeError) and exc.filename is None
        if broken and _stdout_gone():  # its reader has what it wanted (not a worker's pipe)
            _silence_stdout()
            return EXIT_BROKEN_PIPE
        print(
            f"flexflow: error: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
            file=sys.stderr,
        )
        return EXIT_USAGE
    except MemoryError as exc:  # numpy's allocations of a model too large for this host
        print(
            f"flexflow: error: out of memory ({exc}); use a smaller --batch-size or model.",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C
        print(
            "flexflow: interrupted (every file it writes is written whole or not at all).",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED


def _stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader went away (its write end polls as an
    error), not another pipe of the command's (a scan worker's) that broke."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no file descriptor (a test's capture)
        return False


def _silence_stdout() -> None:
    """Point standard output at /dev/null: what is still buffered for the closed pipe would
    otherwise fail again, loudly, when the interpreter flushes it at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
