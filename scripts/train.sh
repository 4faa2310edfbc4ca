#!/usr/bin/env bash
# The main job on this machine; sets up .venv first (idempotent): search a parallelization
# strategy for a model on this machine's processors for BUDGET seconds, then train the model with
# it through Legate (LeNet on scikit-learn's handwritten digits by default). Writes the strategy,
# the simulated iteration as a Perfetto trace and a timeline picture, the search as a picture,
# the measured tasks of the last epoch as a Perfetto trace, and a checkpoint under out/.
# The search prices tasks with times measured on this host (out/MODEL-profile.json, measured on
# the first run). Usage: bash scripts/train.sh [MODEL] [BUDGET_SECONDS] [EPOCHS] [extra examples/train.py flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
model=${1:-lenet}
budget=${2:-10}
epochs=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
cpus=${FLEXFLOW_CPUS:-$(nproc)}
mkdir -p out
rm -f "out/$model-search.png"  # an earlier run's search must not pass for this one's
search=()
if awk -v b="$budget" 'BEGIN { exit !(b + 0 > 0) }'; then  # 0, 00, 0.0: no search to draw
    search=(--search-png "out/$model-search.png")
fi
source .venv/bin/activate
legate --cpus "$cpus" --gpus 0 examples/train.py --model "$model" --epochs "$epochs" \
    --budget "$budget" --export-strategy "out/$model-strategy.json" \
    --profile "out/$model-profile.json" \
    --checkpoint "out/$model-checkpoint.npz" --trace "out/$model-trace.json" \
    --timeline-png "out/$model-timeline.png" --measured-trace "out/$model-measured-trace.json" \
    ${search[@]+"${search[@]}"} "$@"
drawn=""
if [[ -f "out/$model-search.png" ]]; then drawn=" and the search out/$model-search.png"; fi
echo "wrote out/$model-profile.json (the task times measured here), out/$model-strategy.json," \
    "out/$model-checkpoint.npz, the simulated and measured iterations out/$model-trace.json" \
    "and out/$model-measured-trace.json (open in ui.perfetto.dev), out/$model-timeline.png$drawn"
