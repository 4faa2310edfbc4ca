"""FlexFlow on Legate: SOAP parallelization search and training (Jia, Zaharia, Aiken, SysML 2019).

Importing flexflow prepares the process for Legate (see `flexflow.bootstrap`) without starting it:
the layer API, the operator graph, the simulator and the search run without Legate; only
`flexflow.runtime` imports it.
"""

from __future__ import annotations

from flexflow import bootstrap
from flexflow.errors import RuntimeSetupError

try:
    LEGATE_SETUP = bootstrap.prepare()
except RuntimeSetupError as exc:  # the host or the environment, not a bug: no traceback
    raise SystemExit(str(exc)) from None

from flexflow.config import FFConfig  # noqa: E402
from flexflow.graph import OperatorGraph  # noqa: E402
from flexflow.layers import Tensor  # noqa: E402
from flexflow.model import FFModel  # noqa: E402
from flexflow.ops import ActiMode, DType  # noqa: E402
from flexflow.ops.embedding import AggrMode  # noqa: E402
from flexflow.ops.pool2d import PoolType  # noqa: E402

DataType = DType

__all__ = [
    "ActiMode",
    "AggrMode",
    "DataType",
    "FFConfig",
    "FFModel",
    "LEGATE_SETUP",
    "OperatorGraph",
    "PoolType",
    "Tensor",
]
