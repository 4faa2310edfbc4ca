"""The one error hierarchy of flexflow: every message names the object, what was expected, what it got, and the fix.

The CLI turns any `FlexFlowError` into a single line on stderr and exit code 2, so a user never
sees a traceback for bad input.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager


def shown(value: object) -> str:
    """`value` as a message quotes it, cut to 40 characters (an int of 400 digits is)."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


class FlexFlowError(Exception):
    """Base of every error a user can cause (bad model, strategy, machine or file)."""


class FlexFlowWarning(UserWarning):
    """Input that works but may not be what the user meant (the CLI prints it as one line)."""


class ShapeError(FlexFlowError, ValueError):
    """A layer was given inputs whose shapes, ranks or dtypes it cannot take."""


class GraphError(FlexFlowError, ValueError):
    """The operator graph is malformed (unknown tensor, cycle, truncated graph file)."""


class StrategyError(FlexFlowError, ValueError):
    """A parallelization configuration or strategy does not fit its op, graph or machine;
    `problems` lists each one found (for callers that word the error their own way)."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)


class MachineError(FlexFlowError, ValueError):
    """A machine description is malformed or names devices or links that do not exist."""


class ModelError(FlexFlowError, ValueError):
    """A model name or model file cannot be resolved to a model."""


class RuntimeSetupError(FlexFlowError, RuntimeError):
    """Legate or the native libraries cannot be started on this host."""


class OutputPathError(FlexFlowError, ValueError):
    """A file to write cannot be written there (a directory, or a parent that is a file)."""


class NotOfferedError(FlexFlowError, AttributeError):
    """One of FlexFlow's names this API does not offer (an AttributeError too, so `hasattr`
    and `getattr` with a default work); the message names what to use instead."""


class CheckpointError(FlexFlowError, ValueError):
    """A checkpoint file cannot be read, or does not hold what this model and optimizer need."""


@contextmanager
def one_line_warnings(prefix: str = "flexflow") -> Iterator[None]:
    """Inside the block a FlexFlowWarning prints as one line on stderr (`prefix: warning: ...`,
    no source line: it is about the user's input, not the code); other warnings as Python
    shows them. For commands and scripts; a library caller keeps Python's own display."""

    previous = warnings.showwarning  # pytest's capture, or Python's own

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        if issubclass(category, FlexFlowWarning):
            print(f"{prefix}: warning: {message}", file=sys.stderr)
        else:
            previous(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield
