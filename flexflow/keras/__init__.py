"""FlexFlow's `flexflow.keras`: its Keras-style models (`models.Sequential`, `models.Model`),
layers, optimizers, losses, metrics, initializers, callbacks, backend functions and data sets,
over this package's layer API and training loop (a model is built into
`flexflow.core.FFModel` at compile and trained by its fit; README, "Porting a FlexFlow
script"). Nothing here starts Legate before compile."""

from flexflow.keras import (
    backend,
    callbacks,
    datasets,
    initializers,
    layers,
    losses,
    metrics,
    models,
    optimizers,
    preprocessing,
    regularizers,
)

__all__ = [
    "backend",
    "callbacks",
    "datasets",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "models",
    "optimizers",
    "preprocessing",
    "regularizers",
]
