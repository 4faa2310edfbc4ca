"""flexflow.keras.datasets: FlexFlow's examples' data sets, from Keras' cache or a download."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import tarfile
import urllib.error

import numpy as np
import pytest

from flexflow.errors import FlexFlowError
from flexflow.keras.datasets import cifar10, files, mnist


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty Keras cache, and no network: a download fails as on this machine."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))

    def offline(url, timeout):
        raise urllib.error.URLError("no network here")

    monkeypatch.setattr(files.urllib.request, "urlopen", offline)
    return tmp_path / "keras" / "datasets"


def _mnist_npz(path, size=12):
    rng = np.random.default_rng(0)
    arrays = {
        "x_train": rng.integers(0, 256, (size, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, size, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (size // 2, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, size // 2, dtype=np.uint8),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return arrays


def test_mnist_reads_the_cached_file_as_flexflows_loader_returns_it(cache):
    arrays = _mnist_npz(cache / "mnist.npz")
    (x_train, y_train), (x_test, y_test) = mnist.load_data()
    assert x_train.dtype == np.uint8 and x_train.shape == (12, 28, 28)
    assert np.array_equal(x_train, arrays["x_train"]) and np.array_equal(y_test, arrays["y_test"])


def test_a_missing_data_set_without_a_network_says_where_to_put_it(cache):
    with pytest.raises(FlexFlowError, match=r"could not download .*mnist.npz \(no network here\)"):
        mnist.load_data()
    with pytest.raises(FlexFlowError, match=rf"copy the file to {cache}/cifar-10-batches-py"):
        cifar10.load_data()
    assert not any(cache.iterdir())  # nothing half-written left behind


def test_a_download_is_checked_and_renamed_into_place_whole(cache, monkeypatch, tmp_path):
    source = tmp_path / "served.npz"
    _mnist_npz(source)
    payload = source.read_bytes()

    def serve(url, timeout):
        return io.BytesIO(payload)

    monkeypatch.setattr(files.urllib.request, "urlopen", serve)
    with pytest.raises(FlexFlowError, match=r"has SHA-256 .*, not 731c5ac6"):
        mnist.load_data()  # not MNIST's file: refused, nothing kept
    assert not (cache / "mnist.npz").exists() and not list(cache.iterdir())
    monkeypatch.setattr(mnist, "SHA256", hashlib.sha256(payload).hexdigest())
    (x_train, _), _ = mnist.load_data()
    assert x_train.shape == (12, 28, 28) and (cache / "mnist.npz").read_bytes() == payload
    mask = os.umask(0)
    os.umask(mask)
    assert (cache / "mnist.npz").stat().st_mode & 0o777 == 0o666 & ~mask  # was mkstemp's 0600


def _cifar_archive(path, batches=6):
    """An archive shaped as CIFAR-10's: pickled (protocol 2) dicts with bytes keys."""
    rng = np.random.default_rng(1)
    with tarfile.open(path, "w:gz") as tar:
        for i, name in enumerate([f"data_batch_{k}" for k in range(1, batches)] + ["test_batch"]):
            entry = {
                b"batch_label": name.encode(),
                b"labels": [int(v) for v in rng.integers(0, 10, 10_000)],
                b"data": np.full((10_000, 3072), i, dtype=np.uint8),
                b"filenames": [b"x.png"] * 10_000,
            }
            data = pickle.dumps(entry, protocol=2)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_cifar10_unpacks_the_cached_archive_channels_first(cache):
    cache.mkdir(parents=True)
    _cifar_archive(cache / "cifar-10-batches-py.tar.gz")
    (x_train, y_train), (x_test, y_test) = cifar10.load_data(20_000)
    assert x_train.shape == (20_000, 3, 32, 32) and x_train.dtype == np.uint8
    assert y_train.shape == (20_000, 1) and y_test.shape == (10_000, 1)
    assert x_train[0, 0, 0, 0] == 0 and x_train[-1, 0, 0, 0] == 1  # batches 1 and 2, in order
    assert x_test[0, 0, 0, 0] == 5
    assert (cache / "cifar-10-batches-py").is_dir()  # unpacked once, then read as it is
    (again, _), _ = cifar10.load_data(10_000)
    assert np.array_equal(again, x_train[:10_000])
    with pytest.raises(FlexFlowError, match=r"pass 10000, 20000, 30000, 40000 or 50000"):
        cifar10.load_data(15_000)


def test_a_cifar_batch_that_would_run_code_is_refused(cache):
    folder = cache / "cifar-10-batches-py"
    folder.mkdir(parents=True)

    class Runs:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        (folder / name).write_bytes(pickle.dumps({b"data": Runs(), b"labels": []}, protocol=2))
    with pytest.raises(FlexFlowError, match=r"not a CIFAR-10 batch \(it names posix.system"):
        cifar10.load_data(10_000)


def test_two_ranks_unpacking_cifar_at_once_both_read_it(cache, monkeypatch):
    """Legate runs a script on every rank: the second to rename the unpacked folder into place
    met the first's (OSError: Directory not empty)."""
    cache.mkdir(parents=True)
    _cifar_archive(cache / "cifar-10-batches-py.tar.gz")
    unpack = files._extract

    def other_rank_first(tar, into):
        unpack(tar, into)
        unpack(tar, cache)  # the other rank's folder lands first

    monkeypatch.setattr(files, "_extract", other_rank_first)
    (x_train, _), _ = cifar10.load_data(10_000)
    assert x_train.shape == (10_000, 3, 32, 32)
