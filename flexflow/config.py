"""FFConfig: the run's settings (batch size, epochs, learning rate, strategy choice), as in
FlexFlow's Python API, where the same settings also come from the command line."""

from __future__ import annotations

import argparse
import difflib
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from flexflow.errors import FlexFlowError
from flexflow.fileio import output_file
from flexflow.ops.checks import is_int, is_real


def _named(key: str) -> str:
    """How an error names a setting: a script's user sets it by its flag (the first long one
    `FFConfig.add_arguments` gives it), a program by field."""
    parser = argparse.ArgumentParser(add_help=False)
    FFConfig.add_arguments(parser)
    (flag,) = [
        next(o for o in action.option_strings if o.startswith("--"))
        for action in parser._actions
        if action.dest == key
    ]
    return f"FFConfig: {key} ({flag})"


@dataclass(frozen=True, slots=True)
class FFConfig:
    batch_size: int = 64
    epochs: int = 1
    learning_rate: float = 0.01
    seed: int = 0
    search_budget: float = 0.0
    """Seconds of MCMC search at compile time (0: data parallelism unless a strategy is imported)."""
    import_strategy: str | None = None
    export_strategy: str | None = None
    steps_per_execution: int = 8
    """Training steps per Legate launch where the model allows (as Keras' option of this name:
    `flexflow.runtime.step_launches`); the same numbers for any value, less runtime overhead
    for more. 1: a launch per step."""
    trials: bool = True
    """After a search, time the strategies the simulation cannot tell from its pick and keep
    the fastest measured (`flexflow.planning`); single-process runs only."""

    def __post_init__(self) -> None:
        for key in ("batch_size", "epochs", "steps_per_execution"):
            value = getattr(self, key)
            if not is_int(value) or value <= 0:
                raise FlexFlowError(f"{_named(key)} must be a positive integer, got {value!r}.")
        if not (is_real(self.learning_rate) and 0 < self.learning_rate < math.inf):
            raise FlexFlowError(
                f"{_named('learning_rate')} must be a positive number, got {self.learning_rate!r}."
            )
        if not is_int(self.seed) or self.seed < 0:
            raise FlexFlowError(f"{_named('seed')} must be an integer >= 0, got {self.seed!r}.")
        if not (is_real(self.search_budget) and 0 <= self.search_budget < math.inf):
            raise FlexFlowError(
                f"{_named('search_budget')} must be a finite number of seconds >= 0 (a search "
                f"stops at its budget), got {self.search_budget!r}."
            )
        if self.import_strategy is not None and self.search_budget > 0:  # before any work
            raise FlexFlowError(
                "FFConfig: give either import_strategy (--import-strategy) or search_budget "
                "(--budget), not both; to refine an imported strategy run `flexflow search MODEL "
                "--init FILE` and import its export."
            )

    def get_batch_size(self) -> int:
        """FlexFlow's accessor, kept so FlexFlow scripts run unchanged."""
        return self.batch_size

    def get_epochs(self) -> int:
        return self.epochs

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """FlexFlow's training flags: -b/--batch-size, -e/--epochs, --lr, --seed, --budget,
        --import-strategy, --export-strategy, --steps-per-execution (Keras') and --no-trials."""
        parser.add_argument("-b", "--batch-size", type=int, default=64)
        parser.add_argument("-e", "--epochs", type=int, default=1)
        parser.add_argument(
            "--lr", "--learning-rate", dest="learning_rate", type=float, default=0.01
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--budget",
            "--search-budget",
            dest="search_budget",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="search a strategy for this long on the processors of this run (default: "
            "data parallelism)",
        )
        parser.add_argument(
            "--import-strategy",
            metavar="FILE",
            help="train with this strategy file, or a named strategy (dp, expert, model, random)",
        )
        parser.add_argument(
            "--export-strategy",
            metavar="FILE",
            type=output_file,
            help="write the strategy used (atomically)",
        )
        parser.add_argument(
            "--steps-per-execution",
            type=int,
            default=8,
            metavar="K",
            help="training steps per Legate launch where the model allows (default 8; the "
            "same numbers for any K)",
        )
        parser.add_argument(
            "--no-trials",
            dest="trials",
            action="store_false",
            help="keep the search's pick without timing the strategies it simulates close to",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace | Sequence[str] | None = None) -> FFConfig:
        """The settings from parsed arguments, or parsed from `args` (default: sys.argv):
        `--help` prints these flags and exits; other flags are left to the script, with a
        warning for one that looks like a misspelt flag of these (`--bugdet`)."""
        if not isinstance(args, argparse.Namespace):
            parser = argparse.ArgumentParser(description="FlexFlow's training flags (FFConfig).")
            cls.add_arguments(parser)
            args, rest = parser.parse_known_args(args)
            flags = [o for action in parser._actions for o in action.option_strings]
            for arg in rest:
                name = arg.split("=", 1)[0]
                close = difflib.get_close_matches(name, flags, n=1, cutoff=0.8)
                if name.startswith("--") and close:
                    warnings.warn(
                        f"FFConfig.from_args: {name} is not one of its flags and is left to "
                        f"the script; did you mean {close[0]}?",
                        stacklevel=2,
                    )
        return cls(
            batch_size=args.batch_size,
            epochs=args.epochs,
            learning_rate=args.learning_rate,
            seed=args.seed,
            search_budget=args.search_budget,
            import_strategy=args.import_strategy,
            export_strategy=args.export_strategy,
            steps_per_execution=args.steps_per_execution,
            trials=args.trials,
        )
