"""MNIST's handwritten digits as FlexFlow's (and Keras') `mnist.load_data()` returns them."""

from __future__ import annotations

import zipfile

import numpy as np

from flexflow.errors import FlexFlowError
from flexflow.keras.datasets.files import cached_file

ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
"""The hash Keras checks for the file at ORIGIN."""

Split = tuple[np.ndarray, np.ndarray]


def load_data(path: str = "mnist.npz") -> tuple[Split, Split]:
    """`(x_train, y_train), (x_test, y_test)`: uint8 images (60,000 and 10,000 of 28 x 28)
    and their uint8 digits, from `path` in the cache directory (downloaded if absent)."""
    file = cached_file(path, ORIGIN, SHA256 if path == "mnist.npz" else None)
    try:
        with np.load(file, allow_pickle=False) as data:
            return (data["x_train"], data["y_train"]), (data["x_test"], data["y_test"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise FlexFlowError(
            f"{file} is not MNIST's mnist.npz ({exc}); remove it to download it again."
        ) from None
