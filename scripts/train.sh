#!/usr/bin/env bash
# The main job on this machine; sets up .venv first (idempotent): search a parallelization
# strategy for a zoo model on this machine's processors and simulate it, writing the strategy,
# a Perfetto trace and a timeline picture under out/. Usage: bash scripts/demo.sh [MODEL] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=${1:-lenet}
budget=${2:-10}
mkdir -p out
.venv/bin/flexflow summary "$model"
.venv/bin/flexflow search "$model" --machine local --budget "$budget" --export "out/$model-strategy.json"
.venv/bin/flexflow simulate "$model" --machine local --strategy "out/$model-strategy.json" \
    --trace "out/$model-trace.json" --timeline-png "out/$model-timeline.png"
echo "wrote out/$model-strategy.json, out/$model-trace.json (open in ui.perfetto.dev), out/$model-timeline.png"
