"""On a GPU: every op kind's tiles, batch norm's shared statistics, the optimizers and the losses
against the numpy references (the same checks as scripts/gpu_check.py). Skipped without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from flexflow.gpu import check
from flexflow.gpu.cases import CASES
from flexflow.gpu.libraries import gpu_available, missing_libraries
from flexflow.gpu.tiles import GPU_TILES

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu():
    if not gpu_available():
        pytest.skip("no GPU: the CUDA driver reports no device (gpu_available() is False)")
    missing = missing_libraries()
    for key in ("cudart", "nvrtc"):
        if key in missing:
            pytest.skip(missing[key])
    from flexflow.gpu.device import Gpu

    with Gpu() as device:
        yield device


def _failures(results):
    return [
        f"{r.check}: {r.what}: error {r.max_rel_error:.2e} {r.note}" for r in results if not r.ok
    ]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_tile_matches_the_numpy_reference(gpu, case):
    missing = missing_libraries()
    for key in GPU_TILES[case.op.kind].libraries:
        if key in missing:
            pytest.skip(missing[key])
    results = check.check_tile(gpu, case)
    assert results and not _failures(results)


def test_batch_norm_shared_statistics(gpu):
    assert not _failures(check.check_batch_norm_statistics(gpu))


def test_optimizer_updates_are_bit_identical_to_the_reference(gpu):
    results = check.check_optimizers(gpu)
    assert not _failures(results)
    assert all(r.exact for r in results), [r for r in results if not r.exact]


def test_losses(gpu):
    assert not _failures(check.check_losses(gpu, check.load_loss_reference(REPO)))
