"""Do Legate Python tasks placed on different CPU processors run at the same time? (groundwork for the runtime)

Each task sleeps SLEEP_S with the GIL released, as numpy's BLAS and our C kernels do. Printed:
the wall time of two tasks launched one by one with and without `Scope` placement on CPUs 0
and 1, an index launch of two point tasks, and two scoped tasks reading a store attached from a
numpy buffer. About SLEEP_S means concurrent, about 2 * SLEEP_S means serialized.

    source .venv/bin/activate && legate --cpus 2 --gpus 0 benchmarks/legate_placement.py
"""

from __future__ import annotations

import time

import numpy as np

# isort: off
import flexflow  # noqa: F401  (first: prepares the process for Legate before it is imported)
from legate.core import (
    Scope,
    TaskTarget,
    constant,
    dimension,
    get_legate_runtime,
    get_machine,
)
from legate.core import types as ty
from legate.core.task import InputStore, OutputStore, task

# isort: on
from results_io import no_options

SLEEP_S = 0.2
REPEATS = 3


@task
def sleepy(x: InputStore, y: OutputStore) -> None:
    time.sleep(SLEEP_S)


def timed(label: str, launch) -> None:
    runtime = get_legate_runtime()
    walls = []
    for _ in range(REPEATS):
        runtime.issue_execution_fence(block=True)
        begin = time.perf_counter()
        launch()
        runtime.issue_execution_fence(block=True)
        walls.append(time.perf_counter() - begin)
    print(f"{label:<55} best of {REPEATS}: {min(walls):.3f} s (one task: {SLEEP_S:.3f} s)")


def main() -> None:
    runtime = get_legate_runtime()
    cpus = get_machine().only(TaskTarget.CPU)
    if cpus.count(TaskTarget.CPU) < 2:
        raise SystemExit("run with at least 2 CPU processors: legate --cpus 2 --gpus 0 ...")
    x = runtime.create_store(ty.float32, (8, 4))
    runtime.issue_fill(x, 1.0)
    outputs = [runtime.create_store(ty.float32, (4, 4)) for _ in range(2)]
    halves = [x.slice(0, slice(4 * k, 4 * k + 4)) for k in range(2)]

    def scoped(inputs) -> None:
        for k in range(2):
            with Scope(machine=cpus[k : k + 1]):
                sleepy(inputs[k], outputs[k])

    def unscoped() -> None:
        for k in range(2):
            sleepy(halves[k], outputs[k])

    def index_launch() -> None:
        y = runtime.create_store(ty.float32, (8, 4))
        launch = runtime.create_manual_task(sleepy.library, sleepy.task_id, (2,))
        launch.add_input(x.partition_by_tiling((4, 4)), (dimension(0), constant(0)))
        launch.add_output(y.partition_by_tiling((4, 4)), (dimension(0), constant(0)))
        launch.execute()

    attached_buffer = np.ones((8, 4), dtype=np.float32)
    attached = runtime.create_store_from_buffer(ty.float32, (8, 4), attached_buffer, False)
    attached_halves = [attached.slice(0, slice(4 * k, 4 * k + 4)) for k in range(2)]

    timed("two tasks, Scope on CPU 0 and CPU 1", lambda: scoped(halves))
    timed("two tasks, no Scope", unscoped)
    timed("index launch of two point tasks", index_launch)
    timed(
        "two tasks on CPU 0 and 1 reading an attached numpy buffer", lambda: scoped(attached_halves)
    )


if __name__ == "__main__":
    no_options(__doc__)
    main()
