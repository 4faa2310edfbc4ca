"""Argument types and the arguments most `flexflow` subcommands share (model, machine, batch, profile, strategy)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from flexflow.errors import FlexFlowError

if TYPE_CHECKING:  # the commands import the simulator when they run: a fast --help
    from flexflow.simulator import SimContext
    from flexflow.strategy import Strategy


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def loss_arg(text: str) -> str:
    """A loss `compile` takes, by its name or FlexFlow's LossType name."""
    from flexflow.errors import FlexFlowError
    from flexflow.runtime.loss import loss_name  # no Legate

    try:
        return loss_name(text)
    except FlexFlowError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def workers_arg(text: str) -> int:
    """A number of worker processes, or `auto`: one per core, as many as memory holds
    (`flexflow.search.processes.auto_workers`)."""
    from flexflow.search.processes import auto_workers, usable_cores

    if text == "auto":
        return auto_workers()
    try:
        workers = positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or 'auto', got {text!r}"
        ) from None
    cores = usable_cores()
    if workers > cores:  # each worker simulates flat out: more would only share the cores
        raise argparse.ArgumentTypeError(
            f"{workers} worker processes would share this host's {cores} usable core(s); "
            f"give at most {cores}, or auto"
        )
    return workers


def seed_int(text: str) -> int:
    """A random seed: numpy's generators take integers >= 0."""
    return nonnegative_int(text)


def nonnegative_int(text: str) -> int:
    """A count that may be 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _number(text: str, fits: Callable[[float], bool], expected: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not fits(value):  # NaN fits nothing
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value:g}")
    return value


def positive_float(text: str) -> float:
    return _number(text, lambda value: value > 0, "a positive number")


def share(text: str) -> float:
    """A probability: a number in [0, 1]."""
    return _number(text, lambda value: 0.0 <= value <= 1.0, "a number in [0, 1]")


def add_model_and_machine(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="a zoo name or a .py file defining build(model)")
    parser.add_argument(
        "--machine",
        required=True,
        help="p100:N, k80:N, dgx-h100:N, dgx-h200:N, local or a JSON file",
    )


def add_batch_size(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--batch-size", type=positive_int, default=None, help="override the batch size"
    )


def batch_config(args: argparse.Namespace):
    """The FFConfig of --batch-size, or None where it is not given (the model's own)."""
    from flexflow.config import FFConfig

    return FFConfig(batch_size=args.batch_size) if args.batch_size else None


def add_profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile", metavar="FILE", help="measured task times overriding the analytic model"
    )


FUSED_LOSS = "sparse_categorical_crossentropy"
"""--fused-launches' default loss: examples/train.py's for classifiers (the steps per launch
default to FFConfig's)."""


def add_fused_launches(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fused-launches",
        action="store_true",
        help="model flexflow's runtime, which runs an op inside the task of the op before it "
        "where their tiles line up (no launch of its own) and, on CPU-only machines, charges "
        "each Legate task it issues to the whole host, as planning a training run does",
    )
    parser.add_argument(
        "--loss",
        type=loss_arg,
        default=None,
        help="with --fused-launches: the training run's loss, which decides where its steps "
        "run C++ task bodies (default: sparse_categorical_crossentropy, examples/train.py's "
        "for classifiers)",
    )
    parser.add_argument(
        "--steps-per-execution",
        type=positive_int,
        default=None,
        metavar="K",
        help="with --fused-launches: the run's training steps per Legate launch where the "
        "model allows (default 8, FFConfig's)",
    )


def load_profile(path: str | None, graph, machine, model: str = "MODEL"):
    """--profile of `simulate`, `search` and `check-local`: the file's measured times, with a
    note on stderr where they leave some of this model's tasks to the analytic model."""
    if path is None:
        return None
    from flexflow.cost import Profile
    from flexflow.profiler import coverage_note

    profile = Profile.load(path)
    note = coverage_note(path, profile, graph, machine, model)
    if note:
        print(f"flexflow: note: {note}", file=sys.stderr)
    return profile


def fused_context(args: argparse.Namespace, graph, machine, profile):
    """The simulation context of `simulate`, `search` and `check-local`: the paper's
    simulator, or with --fused-launches this runtime's as planning a training run models it
    (`flexflow.planning.planning_context`)."""
    from flexflow.config import FFConfig
    from flexflow.cost import CostModel
    from flexflow.planning import planning_context
    from flexflow.simulator import SimContext

    if not getattr(args, "fused_launches", False):
        given = [
            flag
            for flag, dest in (("--loss", "loss"), ("--steps-per-execution", "steps_per_execution"))
            if getattr(args, dest, None) is not None
        ]
        if given:
            raise FlexFlowError(
                f"{' and '.join(given)} matter only with --fused-launches (the paper's "
                "simulator models no training run); add --fused-launches or drop them."
            )
        return SimContext(graph, machine, CostModel(profile))
    loss = args.loss or FUSED_LOSS
    steps = args.steps_per_execution or FFConfig().steps_per_execution
    return planning_context(graph, machine, profile, loss, steps)


def strategy_arg(value: str, context: SimContext, seed: int) -> Strategy:
    """A named strategy, data parallelism at its fastest width, OptCNN's, or a strategy file
    (validated against the model and machine): what `search --init` takes."""
    from flexflow.search.search import initial_strategy

    return initial_strategy(value, context, seed, role="strategy", warn_other_machine=True)
