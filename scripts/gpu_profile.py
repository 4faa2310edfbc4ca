"""Measures a model's GPU task times on this host's GPU, without Legate: a profile for `--profile`.

    python scripts/gpu_profile.py MODEL [MODEL ...] --out FILE [--machine dgx-h200:1]
                                  [--batch-size N] [--repeats K] [--force]

Every distinct tile of every op's configurations on the machine (`flexflow.gpu.profile`) runs
through the GPU kernels on this host's GPU; the times are keyed by the machine's GPU model, so
`flexflow simulate|search MODEL --machine M --profile FILE` prices those tasks by them instead
of the analytic roofline. Several models go into one file. Run it where the machine's GPU is
(the times are this GPU's: a GPU whose name lacks the machine's GPU model's chip, e.g. "H200",
is refused unless --force). Needs numpy, cffi and the NVIDIA wheels,
as scripts/gpu_check.py does. Exit status: 0 written, 1 a model or machine error or a tile
whose kernels failed (the file is written without it, and each is named), 2 usage, 3 no GPU.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from gpu_check import NO_GPU, make_importable


def same_chip(device: str, model: str) -> bool:
    """Whether GPU `device` (as the driver names it, "NVIDIA H200") is of machine model `model`
    ("H200 SXM"): the model's first name with a digit in it, its chip, is in the device's."""
    chips = [t for t in re.split(r"[^0-9A-Za-z]+", model) if any(c.isdigit() for c in t)]
    return bool(chips) and chips[0].lower() in device.lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", metavar="MODEL", help="zoo names or model files")
    parser.add_argument("--out", type=Path, required=True, help="the profile file to write")
    parser.add_argument("--machine", default="dgx-h200:1", help="a GPU machine (dgx-h200:1)")
    parser.add_argument("--batch-size", type=int, default=None, help="override the batch size")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per tile (5)")
    parser.add_argument(
        "--force", action="store_true", help="key the times as the machine's GPU model even when "
        "this host's GPU is another"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeats < 1 or (args.batch_size is not None and args.batch_size < 1):
        parser.error("--repeats and --batch-size must be at least 1")
    make_importable()
    from flexflow.config import FFConfig
    from flexflow.cost import Profile
    from flexflow.errors import FlexFlowError
    from flexflow.fileio import check_output_path
    from flexflow.gpu import libraries
    from flexflow.gpu.check import environment
    from flexflow.gpu.device import Gpu
    from flexflow.gpu.profile import gpu_models, profile_graph_gpu
    from flexflow.machine import parse_machine
    from flexflow.zoo import ZOO, load_model

    try:
        check_output_path(args.out)  # before minutes of measuring, not after
        machine = parse_machine(args.machine)
        models = gpu_models(machine)
        graphs = []
        for name in args.models:
            batch = args.batch_size or (ZOO[name].batch_size if name in ZOO else None)
            config = FFConfig(batch_size=batch) if batch else None
            graphs.append((name, load_model(name, config).graph()))
    except FlexFlowError as error:
        print(f"gpu_profile: {error}", file=sys.stderr)
        return 1
    if not libraries.gpu_available():
        print("gpu_profile: no usable GPU (the CUDA driver reports no device); nothing measured.")
        return NO_GPU
    with Gpu() as gpu:
        device = environment(gpu)["device"]
    others = [m for m in models if not same_chip(device, m)]
    if others and not args.force:
        print(
            f"gpu_profile: this host's GPU is {device}, and {machine.name}'s is "
            f"{', '.join(others)}: its times would be keyed as another GPU's. Pass a machine "
            "with this GPU (a machine file naming its model), or --force to key them so anyway.",
            file=sys.stderr,
        )
        return 1
    print(f"measuring on {device}; times keyed as {', '.join(models)} of {machine.name}")
    from rich.progress import Progress

    profile, failures = Profile(), []

    def failed(node, shape, error) -> None:
        failures.append(f"{node.name} ({node.kind}) tile {shape}: {type(error).__name__}: {error}")

    with Progress() as progress:
        for name, graph in graphs:
            task = progress.add_task(f"{name}", total=None)
            began = time.perf_counter()

            def report(done: int, total: int, task=task) -> None:
                progress.update(task, completed=done, total=total)

            measured = profile_graph_gpu(graph, machine, args.repeats, report, on_failure=failed)
            profile = profile.merged(measured)
            progress.console.print(
                f"{name}: {len(measured.times) // len(models)} distinct tiles in "
                f"{time.perf_counter() - began:.1f} s"
            )
    path = profile.save(args.out)
    print(f"wrote {path} ({len(profile.times)} task times)")
    for failure in failures:
        print(f"not measured (priced by the analytic model): {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
