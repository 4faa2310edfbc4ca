"""What runs an executor's CPU tiles, in one line for a run's log (`examples/train.py` prints it):
the matrix products' library, which step tasks run as one C call and why not, the training
steps per launch, and where the batch norms get their statistics."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flexflow.ops.blas import provider

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor


def describe_kernels(executor: Executor) -> str:
    """The module doc's line for `executor` (`Executor.describe_kernels`)."""
    products = provider()
    if products == "numpy":
        products = "numpy's BLAS (MKL is not installed)"
    steps = len(executor.fused_tasks[-1]) if executor.step_ready[-1] else 0
    native = f"; {len(executor.native_steps)} of {steps} step tasks as one C call" if steps else ""
    if steps and executor.native_step_note:
        native += f" (why not: {executor.native_step_note})"
    cpp = sum(p.in_cpp_body for p in executor.native_steps.values())
    cpp = cpp if executor.cpp_steps else 0
    if cpp:  # with their labels as int64 (flexflow.runtime.native_tasks)
        native += f", {cpp} in C++ task bodies"
    if executor.steps_per_launch > 1:
        native += f"; {executor.steps_per_launch} training steps per launch"
    elif isinstance(executor.step_launch, str):
        native += f"; one training step per launch: {executor.step_launch}"
    return f"matrix products through {products}{native}{_describe_batch_norms(executor)}"


def _describe_batch_norms(executor: Executor) -> str:
    """Where the batch norms get their statistics, for `describe_kernels`: exchanged
    between a concurrent launch's points (every op of such a group is split by sample:
    flexflow.runtime.concurrent), alone with statistics tasks (batch_statistics), or from
    their own tiles, which hold the whole batch (flexflow.fusion)."""
    group_of = {op: group for group in executor.groups for op in group.ops}
    groups = [group_of[node.id] for node in executor.graph.ops if node.op.statistics_dims]
    if not groups:
        return ""
    counts = (
        (sum(g.exchanges for g in groups), "exchanging statistics in concurrent launches"),
        (sum(g.shared_statistics for g in groups), "alone with statistics tasks"),
        (
            sum(not g.exchanges and not g.shared_statistics for g in groups),
            "on their tiles' own statistics",
        ),
    )
    return "; batch norms: " + ", ".join(f"{n} {what}" for n, what in counts if n)
