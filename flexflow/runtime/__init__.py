"""The Legate runtime (paper §7 on Legate): runs training iterations under a SOAP strategy.

`Executor` (flexflow.runtime.executor), the tasks, the launches of several steps
(flexflow.runtime.step_launches) and the stores import Legate, which starts
the Legate runtime (configured by `flexflow.bootstrap`); importing `Executor` from here does so
on first use. The package's plain modules (loss, flat, native_step, plan, passes) import no
Legate, so the simulator can ask them what the runtime will run (flexflow.launches).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flexflow.runtime.executor import Executor

__all__ = ["Executor"]


def __getattr__(name: str):
    if name == "Executor":
        from flexflow.runtime.executor import Executor

        return Executor
    raise AttributeError(f"module 'flexflow.runtime' has no attribute {name!r}")
