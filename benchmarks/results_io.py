"""How every benchmark writes its results: CSV rows and a markdown table, atomically."""

from __future__ import annotations

import argparse
import csv
import io
from collections.abc import Sequence
from pathlib import Path

from flexflow.fileio import atomic_write_text

RESULTS = Path(__file__).resolve().parent / "results"


def write_csv(path: Path, rows: Sequence[dict]) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())


def write_markdown(path: Path, lines: Sequence[str]) -> None:
    atomic_write_text(path, "\n".join(lines) + "\n")


def png_bytes(fig) -> bytes:
    """A matplotlib figure as PNG bytes (for `atomic_write_bytes`); closes the figure."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def no_options(doc: str | None) -> None:
    """The command line of a benchmark whose settings are constants at its top: `--help` prints
    its module doc and exits, anything else is refused, before the benchmark runs or writes."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.parse_args()
