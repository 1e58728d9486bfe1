#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job on the bundled default.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
./build/tools/charm plan --algo charm --ranks 8 --domains 2 --batch 1 --seq 32k --heads 12 --head-dim 192 \
  --dtype bf16 --causal --layout zigzag --pass both --out build/demo-plan.json --dot build/demo-plan.dot
./build/tools/charm validate build/demo-plan.json
