"""Ops that can skip their input gradients (`Op.skips_input_grads`) give the same weight
gradients without them; the runtime asks so for the op reading the model input."""

from __future__ import annotations

import numpy as np
import pytest

from flexflow.ops import ActiMode, TensorSpec
from flexflow.ops.base import full_region
from flexflow.ops.conv2d import Conv2D
from flexflow.ops.dense import Dense
from flexflow.ops.init import initialize

from .opcheck import random_inputs

CASES = [
    (Conv2D(4, 3, 3, 2, 1, 1, 1, ActiMode.AC_MODE_RELU), (2, 3, 7, 6)),
    (Conv2D(6, 2, 2, 1, 1, 0, 0, groups=2, use_bias=False), (2, 4, 5, 5)),
    (Dense(5, ActiMode.AC_MODE_TANH), (3, 4)),
    (Dense(5, use_bias=False), (2, 3, 4)),
]


@pytest.mark.parametrize("op, shape", CASES, ids=lambda c: getattr(c, "kind", str(c)))
def test_weight_gradients_without_input_gradients_are_the_same(op, shape):
    assert op.skips_input_grads
    sig = op.infer("op", [TensorSpec(shape)])
    rng = np.random.default_rng(0)
    inputs = random_inputs(sig, rng)
    weights = [initialize(w, rng) for w in sig.weights]
    region = full_region(sig.output_shape)
    outputs = op.forward_tile(sig, region, inputs, weights)
    grad_outputs = [rng.standard_normal(o.shape) for o in outputs]
    (dx,), full = op.backward_tile(sig, region, inputs, weights, outputs, grad_outputs)
    (skipped,), only = op.backward_tile(
        sig, region, inputs, weights, outputs, grad_outputs, need_input_grads=False
    )
    assert dx is not None and skipped is None
    for a, b in zip(full, only, strict=True):
        np.testing.assert_array_equal(a, b)
