"""FlexFlow's Reuters newswire data set: not offered here (its loader is refused by name)."""

from __future__ import annotations

from typing import Any

from flexflow.errors import NotOfferedError


def load_data(*args: Any, **keywords: Any) -> Any:
    raise NotOfferedError(
        "flexflow.keras.datasets.reuters is not offered (only mnist and cifar10 are); "
        "load the data yourself as numpy arrays and pass them to fit."
    )


__all__ = ["load_data"]
