#!/usr/bin/env bash
# The README's first command: set up, build, and run the main job on the bundled default:
# ask which algorithm to run on 2 x 8 H100 (topologies/h100-2x8.json) for the paper's workload
# (B=16, S=26880, 12 heads of dim 192, bf16): every candidate ranked by fwd+bwd time, with its
# memory verdict and what bounds it; then simulate CHARM+ and write its Chrome trace.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
B=./build/tools/charm
W=(--batch 16 --seq 26880 --heads 12 --head-dim 192 --dtype bf16)
$B advise --topology topologies/h100-2x8.json "${W[@]}"
mkdir -p out
$B simulate --algo charm --topology topologies/h100-2x8.json "${W[@]}" --pass fwd --trace out/charm-h100-2x8.trace.json
echo "# trace: out/charm-h100-2x8.trace.json (open in https://ui.perfetto.dev)"
