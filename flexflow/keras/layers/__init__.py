"""flexflow.keras.layers: FlexFlow's Keras layers, each mapped onto this package's layer API
(`flexflow.layers.LayerAPI`) when its model is compiled."""

from flexflow.keras.layers.base import Layer
from flexflow.keras.layers.convolutional import Conv2D
from flexflow.keras.layers.core import (
    Activation,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    Permute,
    Reshape,
)
from flexflow.keras.layers.input_layer import Input, InputLayer
from flexflow.keras.layers.merge import (
    Add,
    Concatenate,
    Maximum,
    Minimum,
    Multiply,
    Subtract,
    add,
    concatenate,
    maximum,
    minimum,
    multiply,
    subtract,
)
from flexflow.keras.layers.normalization import BatchNormalization
from flexflow.keras.layers.pooling import AveragePooling2D, MaxPooling2D, Pooling2D

__all__ = [
    "Activation",
    "Add",
    "AveragePooling2D",
    "BatchNormalization",
    "Concatenate",
    "Conv2D",
    "Dense",
    "Dropout",
    "Embedding",
    "Flatten",
    "Input",
    "InputLayer",
    "Layer",
    "MaxPooling2D",
    "Maximum",
    "Minimum",
    "Multiply",
    "Permute",
    "Pooling2D",
    "Reshape",
    "Subtract",
    "add",
    "concatenate",
    "maximum",
    "minimum",
    "multiply",
    "subtract",
]
