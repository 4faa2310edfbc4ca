"""FlexFlow's text preprocessing (`Tokenizer`): not offered here."""

from __future__ import annotations

from typing import Any

from flexflow.errors import NotOfferedError


class Tokenizer:
    def __init__(self, *args: Any, **keywords: Any) -> None:
        raise NotOfferedError(
            "flexflow.keras.preprocessing.text.Tokenizer is not offered; turn texts into "
            "numpy arrays of ids or counts yourself (e.g. with scikit-learn's "
            "CountVectorizer) and pass them to fit."
        )


__all__ = ["Tokenizer"]
