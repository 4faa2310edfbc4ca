"""FlexFlow's sequence preprocessing (`pad_sequences`): not offered here."""

from __future__ import annotations

from typing import Any

from flexflow.errors import NotOfferedError


def pad_sequences(*args: Any, **keywords: Any) -> Any:
    raise NotOfferedError(
        "flexflow.keras.preprocessing.sequence.pad_sequences is not offered; pad the id "
        "arrays with numpy (np.zeros((n, length)) filled row by row) before fit."
    )


__all__ = ["pad_sequences"]
