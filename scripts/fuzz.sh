#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan/UBSan and runs each for SECONDS (default 30).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]    e.g. scripts/fuzz.sh 600 fuzz_plan
# Corpora start from tests/fuzz/corpus/<name> and grow in build-fuzz/corpus/<name> (not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}; shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(fuzz_plan fuzz_workload fuzz_topology fuzz_measurements fuzz_trace)
# -O1 -g1 as in the ASan stage: about a third less compile time than -O2 -g, file:line kept in reports.
# FUZZ_BUILD_DIR: a clang ASan build configured with -DCHARM_FUZZ=ON (scripts/sanitize.sh asan makes
# build-asan one) to build the targets in, instead of a build of their own in build-fuzz.
bdir=${FUZZ_BUILD_DIR:-build-fuzz}
if [[ $bdir != build-fuzz ]]; then
  grep -q '^CHARM_FUZZ:BOOL=ON' "$bdir/CMakeCache.txt" 2>/dev/null ||
    { echo "fuzz: $bdir is not configured with -DCHARM_FUZZ=ON (scripts/sanitize.sh asan does that with clang)" >&2; exit 1; }
else
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" -DCHARM_FUZZ=ON \
  -DCHARM_SANITIZE=address,undefined -DCHARM_BUILD_TESTS=OFF -DCHARM_BUILD_BENCH=OFF -DCHARM_BUILD_RUNTIME=OFF \
  -DCHARM_WITH_CUDA=OFF >/dev/null
fi
# A target that does not build is a failure, not a skip: CI would otherwise pass without fuzzing.
if ! cmake --build "$bdir" -j"$(nproc)" --target "${targets[@]}" > "$bdir/fuzz-build.log" 2>&1; then
  tail -30 "$bdir/fuzz-build.log"
  echo "fuzz: the build failed ($bdir/fuzz-build.log)" >&2
  exit 1
fi
tail -1 "$bdir/fuzz-build.log"
# The targets run side by side, as many at a time as there are cores (each is one process), every one for
# the full SECONDS: on CI's 2 cores the stage takes half the wall time of one after another.
jobs=$(nproc)
run_one() {  # target name: its findings under build-fuzz/artifacts/<name>/, its output in build-fuzz/<target>.log
  local t=$1 name=$2
  rm -rf "build-fuzz/artifacts/$name" && mkdir -p "build-fuzz/artifacts/$name" "build-fuzz/corpus/$name"
  cp -n tests/fuzz/corpus/"$name"/* "build-fuzz/corpus/$name/" 2>/dev/null || true
  "$bdir/tests/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="build-fuzz/artifacts/$name/" "build-fuzz/corpus/$name" > "build-fuzz/$t.log" 2>&1 || true
}
for t in "${targets[@]}"; do
  [ -x "$bdir/tests/fuzz/$t" ] || { echo "fuzz: $t is not a fuzz target (tests/fuzz/CMakeLists.txt)" >&2; exit 1; }
done
mkdir -p build-fuzz
pids=()
for t in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || true; done
  echo "fuzz: $t for ${secs}s" >&2
  run_one "$t" "${t#fuzz_}" &
  pids+=($!)
done
wait "${pids[@]}" || true
found=0
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  echo "fuzz: $t" >&2
  grep -E "^(stat::number_of_executed_units|stat::peak_rss|#[0-9]+ +DONE)|ERROR|SUMMARY|crash-|timeout-|leak-|oom-" "build-fuzz/$t.log" || true
  # `ls` of no match exits 2; as the script's last command that once became CI's exit status.
  if compgen -G "build-fuzz/artifacts/$name/*-*" >/dev/null; then
    ls "build-fuzz/artifacts/$name/"
    echo "fuzz: $t found a problem (build-fuzz/$t.log)" >&2
    found=1
  fi
done
(( found == 0 )) || exit 1
echo "fuzz: no crash, timeout, leak or oom in ${targets[*]}" >&2
