"""FFConfig: the run's settings (batch size, epochs, ...), as in FlexFlow's Python API; later features add fields."""

from __future__ import annotations

from dataclasses import dataclass

from flexflow.errors import FlexFlowError


@dataclass(frozen=True, slots=True)
class FFConfig:
    batch_size: int = 64
    epochs: int = 1
    learning_rate: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        for key in ("batch_size", "epochs"):
            value = getattr(self, key)
            if not isinstance(value, int) or value <= 0:
                raise FlexFlowError(f"FFConfig: {key} must be a positive integer, got {value!r}.")
        if not self.learning_rate > 0:
            raise FlexFlowError(
                f"FFConfig: learning_rate must be positive, got {self.learning_rate!r}."
            )

    def get_batch_size(self) -> int:
        """FlexFlow's accessor, kept so FlexFlow scripts run unchanged."""
        return self.batch_size

    def get_epochs(self) -> int:
        return self.epochs
