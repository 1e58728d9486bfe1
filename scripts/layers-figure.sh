#!/usr/bin/env bash
# Draws docs/img/layers.png: the project's targets and which links which, as CMake configures
# them (cmake --graphviz), reduced to the direct edges (a link implied by two others is left out).
# Arrows point from a target to what it uses; nothing points up. Needs cmake, python3 and graphviz.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v dot >/dev/null || { echo "layers-figure: needs graphviz (apt-get install graphviz)" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cmake -S . -B "$dir/build" -G Ninja -DCHARM_BUILD_TESTS=OFF -DCHARM_BUILD_BENCH=OFF --graphviz="$dir/targets.dot" >/dev/null
python3 - "$dir/targets.dot" > "$dir/layers.dot" <<'EOF'
import re, sys
# Where each target's sources live, and what it is for (docs/ARCHITECTURE.md has the rest).
what = {
    "charm": "tools/: the charm command",
    "charm_python": "python/: import charm",
    "charm_cli_run": "tools/: progress lines and exit codes over the app",
    "charm_app": "tools/app/: simulate, compare, advise, sweep (no CLI11)",
    "charm_cli_common": "tools/: flags shared by the commands",
    "charm_app_inputs": "tools/app/: the workload and plans as written",
    "charm_cli_support": "tools/: errors, output files, progress (no CLI11)",
    "charm_calibrate": "calibrate/: the fit (NLopt)",
    "charm_measurements": "calibrate/: measured runs and kernels (CSV)",
    "charm_evaluate": "sim/: evaluate, sweep, advise, formulas",
    "charm_sim": "sim/: discrete-event simulator",
    "charm_topology": "topologies/: hardware, stack, routes",
    "charm_runtime": "runtime/: CPU threads and MPI executors",
    "charm_runtime_cuda": "runtime/cuda/: CUDA streams and NCCL",
    "charm_scheduler": "scheduler/: planners and validator",
    "charm_chakra": "scheduler/chakra/: Chakra export",
    "charm_trace": "scheduler/trace/: timelines and traces",
    "charm_ir": "scheduler/ir/: the plan (one IR)",
    "charm_support": "support/: files, JSON, errors",
}
text = open(sys.argv[1]).read()
names = {}
for node, label in re.findall(r'"(node\d+)" \[ label = "([^"\\]+)', text):
    if label in what:
        names[node] = label
edges = set()
for a, b in re.findall(r'"(node\d+)" -> "(node\d+)"', text):
    if a in names and b in names and names[a] != names[b]:
        edges.add((names[a], names[b]))
print('digraph layers {\n  rankdir=TB; node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica", fontsize=11];')
for n in sorted(set(names.values())):
    print(f'  "{n}" [label="{n}\\n{what[n]}"];')
for a, b in sorted(edges):
    print(f'  "{a}" -> "{b}";')
print("}")
EOF
tred "$dir/layers.dot" | dot -Tpng -Gdpi=96 -o docs/img/layers.png
echo "wrote docs/img/layers.png" >&2
