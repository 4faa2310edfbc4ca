#!/usr/bin/env bash
# Runs the test suite; sets up .venv first (idempotent). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "${@:--q}"
