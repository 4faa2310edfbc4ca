"""The Legate runtime (paper §7 on Legate): runs training iterations under a SOAP strategy.

The only package of flexflow that imports Legate at module level: importing it starts the
Legate runtime (configured by `flexflow.bootstrap`).
"""

from flexflow.runtime.executor import Executor

__all__ = ["Executor"]
