"""Checks flexflow's GPU kernels against the numpy references on a GPU machine, without Legate.

    python scripts/gpu_check.py [--out DIR]    (from the repo root, DIR out/gpu by default;
                                                needs numpy, cffi and the
                                                NVIDIA wheels: cuda-runtime, cublas, cuda-nvrtc,
                                                and cudnn for conv2d/pool2d/softmax/attention)

Runs every op kind's forward and backward tile (halo tiles for conv2d and pool2d), batch norm's
shared-statistics tiles, the optimizer updates and the losses on the GPU, compares each result
with the numpy reference (max |gpu - numpy| / max |numpy| <= 1e-4), times a few GEMM and
convolution sizes, prints a table and writes DIR/gpu_check.json and DIR/gpu_check.md. Exit
status: 0 when every check passed, 1 on a mismatch, 3 when there is no GPU or the CUDA runtime
is missing (nothing checked: the JSON's `checked` is false), 2 for a usage error.
Checks whose libraries are missing (e.g. no cuDNN wheel) are listed as skipped, not failed.
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NO_GPU = 3
"""The exit status when nothing could be checked (argparse's usage errors take 2)."""


class _RepoFinder(importlib.abc.MetaPathFinder):
    """Imports flexflow from this checkout without installing it: `ops/` as `flexflow.ops`
    (what setup.py's package_dir does), and the numpy stand-in for the C kernels as every
    `flexflow.ops.native_*` module (ops/native_*.py call into them) when the C kernels
    (flexflow/_kernels*.so) are not built."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "flexflow.ops":
            init = REPO / "ops" / "__init__.py"
            return importlib.util.spec_from_file_location(
                fullname, init, submodule_search_locations=[str(init.parent)]
            )
        if fullname.startswith("flexflow.ops.native_") and not kernels_built():
            stand_in = REPO / "flexflow" / "gpu" / "native_numpy.py"
            return importlib.util.spec_from_file_location(fullname, stand_in)
        return None


def kernels_built() -> bool:
    return any((REPO / "flexflow").glob("_kernels*.so"))


def make_importable() -> None:
    sys.path.insert(0, str(REPO))
    sys.meta_path.insert(0, _RepoFinder())


def print_table(rows: list[list[str]], header: list[str], title: str) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
        print(f"\n{title}")
        for row in [header] + rows:
            print(
                "  ".join(str(cell).ljust(width) for cell, width in zip(row, widths, strict=True))
            )
        return
    table = Table(title=title)
    for name in header:
        table.add_column(name)
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path("out/gpu"), help="directory for gpu_check.json (out/gpu)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    make_importable()
    from flexflow.gpu import check, libraries
    from flexflow.gpu.cases import CASES
    from flexflow.gpu.device import Gpu

    missing = libraries.missing_libraries()
    usable = libraries.gpu_available() and "cudart" not in missing and "driver" not in missing
    report: dict = {
        "checked": usable,
        "missing_libraries": missing,
        "reference_kernels": "C kernels" if kernels_built() else "numpy stand-in (not built)",
    }
    if not usable:
        print("gpu_check: no usable GPU (driver, device or CUDA runtime missing); nothing checked.")
    for reason in missing.values():
        print(f"missing: {reason}")
    if not usable:
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))
        return NO_GPU

    def available(needed: tuple[str, ...]) -> bool:
        return not any(key in missing for key in needed)

    with Gpu() as gpu:
        report["environment"] = check.environment(gpu)
        results, skipped = check.run_cases(gpu, CASES, available)
        extras = {
            "batch_norm statistics": check.check_batch_norm_statistics,
            "optimizers": check.check_optimizers,
            "losses": lambda g: check.check_losses(g, check.load_loss_reference(REPO)),
        }
        if available(("nvrtc", "driver")):
            for name, extra in extras.items():
                results.extend(check.run_guarded(name, lambda extra=extra: extra(gpu)))
        else:
            skipped += list(extras)
        report["timings"] = []
        if "cublas" not in missing:
            try:
                report["timings"] = check.time_kernels(gpu, conv="cudnn" not in missing)
            except Exception as error:  # the checks above are the point; keep their report
                report["timing_error"] = f"{type(error).__name__}: {error}"
                print(f"timing failed: {report['timing_error']}")
    report["results"] = [r.to_json() for r in results]
    report["skipped"] = skipped
    report["seconds"] = time.perf_counter() - started
    (args.out / "gpu_check.json").write_text(json.dumps(report, indent=2))
    (args.out / "gpu_check.md").write_text(check.markdown(report))

    rows = [
        [
            r.check,
            r.what,
            f"{r.max_rel_error:.2e}",
            "yes" if r.exact else "",
            "ok" if r.ok else f"FAIL {r.note}",
        ]
        for r in results
    ]
    print_table(
        rows, ["check", "result", "max rel error", "exact", "status"], "GPU kernels vs numpy"
    )
    timing_rows = [
        [t["kernel"], t["shape"], f"{t['ms']:.3f}", f"{t['tflops']:.1f}"] for t in report["timings"]
    ]
    print_table(timing_rows, ["kernel", "shape", "ms", "TFLOP/s"], "Measured op costs")
    failed = [r for r in results if not r.ok]
    print(
        f"\n{len(results) - len(failed)}/{len(results)} results within {check.TOLERANCE:g}; "
        f"{len(skipped)} checks skipped ({', '.join(skipped) or 'none'}); "
        f"{report['seconds']:.1f} s; wrote {args.out / 'gpu_check.json'} and gpu_check.md"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
