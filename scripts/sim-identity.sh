#!/usr/bin/env bash
# Saves `charm simulate --json` of every algorithm x fwd/bwd x {full, causal zigzag} x two sequence lengths on
# every preset (topologies/*.json, topologies/nominal/*.json) and on --uniform 8/16/64 ranks, one file per case
# (stdout, stderr and exit status), so that two builds can be compared byte for byte:
#   scripts/sim-identity.sh OLD/charm /tmp/a; scripts/sim-identity.sh build/tools/charm /tmp/b; diff -r /tmp/a /tmp/b
set -euo pipefail
charm=$(realpath "$1")
out=$2
jobs=${JOBS:-2}
cd "$(dirname "$0")/.."
mkdir -p "$out"
algos="ring ring-zigzag merge rm+ charm allgather-kv tasp tasp-zigzag ulysses usp"
cases=()
for algo in $algos; do
  for pass in fwd bwd; do
    for mask in full causal; do
      for seq in 4k 64k; do
        for t in topologies/*.json topologies/nominal/*.json; do
          cases+=("$algo $pass $mask $seq topo $t")
        done
        for n in 8 16 64; do
          cases+=("$algo $pass $mask $seq uniform $n")
        done
      done
    done
  done
done
run_case() {
  read -r algo pass mask seq kind where <<<"$1"
  local name=${algo}_${pass}_${mask}_${seq}_${kind}_${where//\//_}
  local args=(simulate --algo "$algo" --pass "$pass" --seq "$seq" --json)
  [[ $mask == causal ]] && args+=(--causal --layout zigzag)
  if [[ $kind == topo ]]; then
    args+=(-t "$where")
  else
    args+=(--uniform --ranks "$where" --bw-gbps 50 --tflops 300 --latency-us 5 --hbm-gbps 2000)
  fi
  local rc=0
  "$charm" "${args[@]}" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
  echo "$rc" >"$out/$name.rc"
}
export -f run_case
export charm out
printf '%s\n' "${cases[@]}" | xargs -P "$jobs" -I{} bash -c 'run_case "$@"' _ {}
echo "${#cases[@]} cases in $out"
