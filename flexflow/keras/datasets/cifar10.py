"""CIFAR-10 as FlexFlow's `cifar10.load_data(num_samples)` returns it: channels first."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from flexflow.errors import FlexFlowError
from flexflow.keras.datasets.files import cached_tree

ORIGIN = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
BATCH = 10_000  # images per file of the archive
Split = tuple[np.ndarray, np.ndarray]


def load_data(num_samples: int = 40_000) -> tuple[Split, Split]:
    """`(x_train, y_train), (x_test, y_test)`: the first `num_samples` training images (a
    multiple of 10,000 up to 50,000; FlexFlow's default 40,000) and the 10,000 test images,
    uint8 (n, 3, 32, 32), with uint8 labels (n, 1)."""
    if (
        isinstance(num_samples, bool)
        or not isinstance(num_samples, int)
        or not (0 < num_samples <= 5 * BATCH and num_samples % BATCH == 0)
    ):
        raise FlexFlowError(
            f"cifar10.load_data(num_samples={num_samples!r}): CIFAR-10's training set comes in "
            "files of 10,000 images; pass 10000, 20000, 30000, 40000 or 50000."
        )
    folder = cached_tree("cifar-10-batches-py", ORIGIN)
    parts = [_batch(folder / f"data_batch_{i}") for i in range(1, num_samples // BATCH + 1)]
    x_test, y_test = _batch(folder / "test_batch")
    x_train = np.concatenate([x for x, _ in parts])
    y_train = np.concatenate([y for _, y in parts])
    return (x_train, y_train.reshape(-1, 1)), (x_test, y_test.reshape(-1, 1))


def _batch(path: Path) -> Split:
    """One file of the archive: a pickled dict of b"data" (10,000 x 3,072 bytes) and
    b"labels", read by an unpickler that builds only those (a pickle can run any code)."""
    try:
        with open(path, "rb") as file:
            entries = _DataOnly(file, encoding="bytes").load()
        data = np.asarray(entries[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(entries[b"labels"], dtype=np.uint8)
    except (OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as exc:
        raise FlexFlowError(
            f"{path} is not a CIFAR-10 batch ({exc}); remove {path.parent} to download it again."
        ) from None
    if len(data) != len(labels):
        raise FlexFlowError(
            f"{path} has {len(data)} images but {len(labels)} labels; remove {path.parent} to "
            "download it again."
        )
    return data, labels


class _DataOnly(pickle.Unpickler):
    """Builds numpy arrays, plain containers and bytes only (Python 3's protocol-2 pickles
    spell bytes as a call of `_codecs.encode`)."""

    _ALLOWED = {
        ("_codecs", "encode"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"it names {module}.{name}, which a data set does not")
        return super().find_class(module, name)
