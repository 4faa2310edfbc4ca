#!/usr/bin/env bash
# The main job on this machine; sets up .venv first (idempotent). Extra arguments replace the
# default model (e.g. `bash scripts/demo.sh inception_v3`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=${1:-lenet}
.venv/bin/flexflow models
.venv/bin/flexflow summary "$model"
