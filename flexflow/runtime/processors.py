"""The strategy's devices as Legate processors: each device of the `local` machine one
processor of this process, which its tasks run on (a `Scope` of that one CPU or GPU)."""

from __future__ import annotations

from legate.core import TaskTarget, get_machine

from flexflow.errors import StrategyError
from flexflow.strategy import Strategy


def device_processors(local, strategy: Strategy) -> list:
    """Each device of the `local` machine as a one-processor Legate machine: CPU devices on
    CPU processors, GPU devices on GPU processors (where Legate picks the GPU variant)."""
    legate_machine = get_machine()
    targets = {"cpu": TaskTarget.CPU, "gpu": TaskTarget.GPU}
    processors = []
    for device, (kind, index) in enumerate(local.kind_ordinals()):
        target = targets[kind]
        available = legate_machine.count(target)
        if index >= available:
            if device in strategy.devices_used():
                raise StrategyError(
                    f"the strategy places tasks on device {device} ({kind} {index}) but "
                    f"this process has {available} {kind.upper()} processor(s); run with "
                    f"`legate --{kind}s {index + 1}` or search for this machine "
                    f"(--machine local)."
                )
            processors.append(None)
            continue
        processors.append(legate_machine.only(target)[index : index + 1])
    return processors
