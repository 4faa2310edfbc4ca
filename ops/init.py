"""Weight initializers named by `WeightSpec.init`, seeded explicitly so every run is reproducible."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .base import WeightSpec

Initializer = Callable[[WeightSpec, np.random.Generator], np.ndarray]


def _glorot_uniform(spec: WeightSpec, rng: np.random.Generator) -> np.ndarray:
    limit = math.sqrt(6.0 / (spec.fan_in + spec.fan_out))
    return rng.uniform(-limit, limit, spec.shape)


def _he_uniform(spec: WeightSpec, rng: np.random.Generator) -> np.ndarray:
    limit = math.sqrt(6.0 / spec.fan_in)
    return rng.uniform(-limit, limit, spec.shape)


def _normal(spec: WeightSpec, rng: np.random.Generator) -> np.ndarray:
    return rng.normal(0.0, 0.02, spec.shape)  # BERT's truncated-normal scale


INITIALIZERS: dict[str, Initializer] = {
    "glorot_uniform": _glorot_uniform,
    "he_uniform": _he_uniform,
    "normal": _normal,
    "zeros": lambda spec, rng: np.zeros(spec.shape),
    "ones": lambda spec, rng: np.ones(spec.shape),
}


def initialize(
    spec: WeightSpec, rng: np.random.Generator, dtype: np.dtype = np.float32
) -> np.ndarray:
    """A freshly initialized array for `spec`."""
    return INITIALIZERS[spec.init](spec, rng).astype(dtype)
