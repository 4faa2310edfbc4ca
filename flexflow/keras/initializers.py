"""FlexFlow's Keras initializers, mapped onto `flexflow.core`'s: Glorot-uniform kernels and
zero biases are the layers' own draws here; RandomUniform and RandomNormal kernels are drawn
from their seeds and set when the model is compiled (`flexflow.core.FFModel.compile`)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Any

from flexflow.errors import NotOfferedError


class Initializer:
    """Base of the initializers; `ffhandle` is the `flexflow.core` initializer, or None where
    the layer's own draw is this one."""

    @property
    def ffhandle(self) -> Any:
        return None

    def for_layer(self, name: str) -> Initializer:
        """This initializer for the layer `name`: one drawing from a seed it was not given
        takes one of the layer's name, so two layers draw different values (as Keras')."""
        if getattr(self, "seed", 0) is None and self.ffhandle is not None:
            return replace(self, seed=zlib.crc32(name.encode()))  # type: ignore[type-var]
        return self


@dataclass(frozen=True)
class DefaultInitializer(Initializer):
    """The layer's own draw (Glorot-uniform kernels, zero biases)."""


@dataclass(frozen=True)
class GlorotUniform(Initializer):
    """Glorot-uniform: the kernels' own draw here. `seed` is taken for FlexFlow's scripts but
    the draw follows the run's seed (FFConfig.seed, --seed)."""

    seed: int | None = None


@dataclass(frozen=True)
class Zeros(Initializer):
    """Zeros: the biases' own start."""


@dataclass(frozen=True)
class RandomUniform(Initializer):
    """Values uniform in [minval, maxval), drawn from `seed` (the layer's when None: `for_layer`)."""

    minval: float = -0.05
    maxval: float = 0.05
    seed: int | None = None

    @property
    def ffhandle(self) -> Any:
        from flexflow.core import UniformInitializer  # flexflow.core imports legate

        return UniformInitializer(self.seed or 0, self.minval, self.maxval)


@dataclass(frozen=True)
class RandomNormal(Initializer):
    """Normal values of `mean` and `stddev`, drawn from `seed` (the layer's when None:
    `for_layer`)."""

    mean: float = 0.0
    stddev: float = 0.05
    seed: int | None = None

    @property
    def ffhandle(self) -> Any:
        from flexflow.core import NormInitializer

        return NormInitializer(self.seed or 0, self.mean, self.stddev)


KERNEL_NAMES = {"glorot_uniform": GlorotUniform(), "zeros": Zeros()}
"""Initializers Keras names by string."""


def kernel_initializer(layer: str, value: Any) -> Initializer:
    """A kernel's initializer from a name or an object; a zero kernel is refused (it would
    never train a ReLU network; the layers draw Glorot-uniform kernels)."""
    found = KERNEL_NAMES.get(value, value) if isinstance(value, str) else value
    if isinstance(found, (GlorotUniform, DefaultInitializer, RandomUniform, RandomNormal)):
        return found
    raise NotOfferedError(
        f"{layer}: kernel_initializer {value!r} is not offered; pass 'glorot_uniform', "
        "GlorotUniform(), RandomUniform(...) or RandomNormal(...)."
    )


def bias_initializer(layer: str, value: Any) -> Initializer:
    """A bias's initializer: zeros only (the biases' start here)."""
    found = KERNEL_NAMES.get(value, value) if isinstance(value, str) else value
    if isinstance(found, (Zeros, DefaultInitializer)):
        return found
    raise NotOfferedError(
        f"{layer}: bias_initializer {value!r} is not offered; biases start at zero here: "
        "pass 'zeros' or Zeros()."
    )


__all__ = [
    "DefaultInitializer",
    "GlorotUniform",
    "Initializer",
    "RandomNormal",
    "RandomUniform",
    "Zeros",
]
