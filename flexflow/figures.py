"""Saving matplotlib figures (timelines, operator graphs) in the format their file name asks for."""

from __future__ import annotations

import io
import os
from pathlib import Path

from flexflow.errors import OutputPathError
from flexflow.fileio import argument_type, atomic_write_bytes, check_output_path

FORMATS = ("png", "svg", "pdf")
DPI = 110


def picture_format(path: str | os.PathLike[str]) -> str:
    """The format `path`'s suffix names (png without one); OutputPathError for another."""
    suffix = Path(path).suffix.lower().lstrip(".")
    if not suffix or str(path) == "-":
        return "png"
    if suffix not in FORMATS:
        raise OutputPathError(
            f"{path}: pictures are written as {', '.join(FORMATS)}; name the file .png, .svg "
            f"or .pdf"
        )
    return suffix


def _check_picture(text: str) -> None:
    check_output_path(text, ".png")  # first: an empty path or a directory has no format
    picture_format(text)


picture_file = argument_type(_check_picture)
"""argparse `type=` of a picture to write: a writable path with a known format."""


def save_figure(fig, path: str | os.PathLike[str]) -> Path:
    """Write `fig` atomically in the format of `path`'s suffix and close it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=picture_format(path), dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return atomic_write_bytes(path, buffer.getvalue())
