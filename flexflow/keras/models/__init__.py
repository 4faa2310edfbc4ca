"""flexflow.keras.models: Sequential and functional (Model) models, compiled into
`flexflow.core.FFModel` and trained by its fit."""

from flexflow.keras.models.base import BaseModel, History
from flexflow.keras.models.model import Model
from flexflow.keras.models.sequential import Sequential

__all__ = ["BaseModel", "History", "Model", "Sequential"]
