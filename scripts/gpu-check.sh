#!/usr/bin/env bash
# One prepared check for a machine with an NVIDIA GPU. Run it once:
#   scripts/gpu-check.sh            # table on stdout; also $OUT/gpu-check.md when OUT is set
# Steps, each under its own time limit (the whole fits 8 minutes on one H200; the
# estimate is at the end of this comment):
#   1. the card (nvidia-smi)          2. build (Release, native CUDA arch), skipped when a
#      .gpu-bundle/ made by scripts/gpu-bundle.sh was carried (the lent H200's image
#      lacks this project's -dev packages: there, carry a bundle)
#   3. GPU tests (ctest: cuda_* tests, labels gpu and integration)
#   4. cuda-local --check for every algorithm (sched::algorithm_names(), region plans
#      included), fwd+bwd (tasp: fwd, the only pass it has), against the fp64 reference
#   5. attention block kernels: ms and TFLOP/s against the card's bf16 peak
#   6. ring and charm timed under cuda-local at a realistic size
# It never stops at a failing step: every step's result goes in the table, and
# the exit code is the number of failed steps (0 = all passed).
#
# Time, estimated from sizes (no step's time here is a measurement on an H200):
#   build: 0 with a carried bundle (else most of the 330 s limit).
#   gpu-tests: about 70 small cuda-local cases (S <= 512) plus the kernel tests, ~1 s each.
#   check-*: 10 runs of S = 1k on 8 ranks. The work is the fp64 reference on the host
#     (B H S^2 D = 1 x 8 x 1k^2 x 64 = 0.5 G multiply-adds, x 3.5 with the backward) and
#     the device start (context and cuBLAS, ~1-2 s). The same 10 commands on the CPU
#     (`--backend threads --check`, executor and reference) took 0.6-4.2 s each, 17.7 s in
#     all, on 2 shared build cores; on the GPU the executor's part moves to the device,
#     so ~5 s a step with the device start, ~50 s for the 10 (each limited to 90 s).
#   kernels: the benchmark's own minimum times, ~1 min; timing: 4 runs of S = 32k, ~10 s each.
#   Sum without the build: ~3 min; the 8 limits below that can all be hit add up to more,
#   but a step that hits its limit is a failure to look at, not an expected time.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build-gpu}
LOGS=$(mktemp -d)
CHARM=$BUILD/tools/charm
failed=0
rows=()

# step NAME LIMIT_S CMD...: runs CMD under `timeout`, output in $LOGS/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - t0))
  local verdict=pass
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then verdict="TIMEOUT (${limit}s)"; elif [ $rc -ne 0 ]; then verdict="FAIL (rc $rc)"; fi
  [ "$verdict" = pass ] || failed=$((failed + 1))
  rows+=("| $name | $verdict | ${took}s |")
  echo "== $name: $verdict in ${took}s" >&2
  [ "$verdict" = pass ] || tail -n 30 "$LOGS/$name.log" >&2
  return $rc
}
# json_field KEY FILE: the first number after "KEY": in a one-line JSON file.
json_field() { sed -n "s/.*\"$1\":\([-0-9.eE+]*\).*/\1/p" "$2" | head -n 1; }

# Prebuilt mode: a .gpu-bundle/ from scripts/gpu-bundle.sh (carried here) replaces the build.
if [ -x .gpu-bundle/bin/charm ]; then
  BUNDLE=$PWD/.gpu-bundle
  # cuBLAS and NCCL come from this machine: the toolkit's lib64 or the Python wheels (nvidia-*).
  cudalibs=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"]
dirs = []
for r in roots:
    for pat in ("libnccl.so.2", "libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13"):
        for f in glob.glob(os.path.join(r, "**", pat), recursive=True):
            if os.path.dirname(f) not in dirs:
                dirs.append(os.path.dirname(f))
print(":".join(dirs))
PY
)
  export LD_LIBRARY_PATH="$BUNDLE/lib:${cudalibs}:${LD_LIBRARY_PATH:-}"
  # The bundle's C++ runtime only where this machine has none that serves the build.
  if ldd "$BUNDLE/bin/charm" | grep -q 'not found'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$BUNDLE/lib-fallback"
  fi
  ldd "$BUNDLE/bin/charm" | grep -E 'not found|nccl|cudart|stdc' >&2
  export CHARM_BIN=$BUNDLE/bin/charm
  CHARM=$BUNDLE/bin/charm
  echo "prebuilt bundle of commit $(cat "$BUNDLE/COMMIT" 2>/dev/null); CUDA libraries from: ${cudalibs:-none found}" >&2
fi
TESTS=${BUNDLE:+$BUNDLE/bin}
TESTS=${TESTS:-$BUILD/tests}
BENCH=${BUNDLE:+$BUNDLE/bin/cuda_attention_bench}
BENCH=${BENCH:-$BUILD/runtime/cuda/cuda_attention_bench}

step card 30 nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
card=$(head -n 1 "$LOGS/card.log")

[ -n "${BUNDLE:-}" ] || step build 330 bash -c "cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=native \
  -DCHARM_BUILD_BENCH=ON >/dev/null && cmake --build $BUILD -j$(nproc) --target charm cuda_host_test cuda_kernels_test \
  cuda_local_test cuda_cli_test cuda_attention_bench"

# The test programs directly (ctest -L gpu would select the same ones, plus other areas' later additions).
step gpu-tests 180 bash -c "$TESTS/cuda_host_test --gtest_brief=1 && $TESTS/cuda_kernels_test --gtest_brief=1 \
  && $TESTS/cuda_local_test --gtest_brief=1 && $TESTS/cuda_cli_test --gtest_brief=1"

# 4. Correctness of every algorithm, bf16, causal (zigzag where the algorithm uses it), 8 ranks,
# H = 8: fwd+bwd (tasp: fwd only). Region plans: ulysses needs n | Hkv (Hkv = 8, no GQA there);
# usp on 2 domains has R = 4 | Hkv = 4; tasp cuts each 128-token shard into phi(8) = 4 parts.
check_rows=()
for algo in ring ring-zigzag merge rm+ charm allgather-kv tasp tasp-zigzag ulysses usp; do
  layout=contiguous
  case $algo in ring-zigzag | charm | tasp-zigzag | usp) layout=zigzag ;; esac
  domains=1
  case $algo in charm | usp) domains=2 ;; esac
  kv=4
  [ $algo = ulysses ] && kv=8
  pass=both
  case $algo in tasp | tasp-zigzag) pass=fwd ;; esac
  name="check-$algo"
  step "$name" 90 "$CHARM" run --backend cuda-local --algo "$algo" --ranks 8 --domains $domains --batch 1 --seq 1k \
    --heads 8 --kv-heads $kv --head-dim 64 --dtype bf16 --causal --layout $layout --pass $pass --check --json \
    --timeout-s 30
  f="$LOGS/$name.log"
  out=$(sed -n 's/.*"max_rel_err":{[^}]*"out":\([^,}]*\).*/\1/p' "$f" | head -n 1)
  dq=$(sed -n 's/.*"max_rel_err":{[^}]*"dq":\([^,}]*\).*/\1/p' "$f" | head -n 1)
  dk=$(sed -n 's/.*"max_rel_err":{[^}]*"dk":\([^,}]*\).*/\1/p' "$f" | head -n 1)
  dv=$(sed -n 's/.*"max_rel_err":{[^}]*"dv":\([^,}]*\).*/\1/p' "$f" | head -n 1)
  check_rows+=("| $algo | $layout | $pass | $kv | ${out:-?} | ${dq:--} | ${dk:--} | ${dv:--} | $(json_field time_ms "$f") |")
done

# A backward-only pass takes its forward results from the device (dense_forward), checked.
step check-bwd-only 60 "$CHARM" run --backend cuda-local --algo ring --ranks 8 --batch 1 --seq 1k --heads 8 \
  --kv-heads 4 --head-dim 64 --dtype bf16 --causal --pass bwd --check --json --timeout-s 30

step kernels 150 "$BENCH" --benchmark_counters_tabular=true
if grep -q "ERROR OCCURRED" "$LOGS/kernels.log"; then
  failed=$((failed + 1))
  rows+=("| kernels | FAIL (a benchmark reported an error) | |")
fi

# 5b. The kernel-times CSV `charm calibrate --kernels` and `simulate --kernel` take: head dims 64, 128
# and 256, block tokens 1k-32k, full and causal, both passes (one file; the card, driver and library
# versions in its header).
KCSV=$LOGS/kernels.csv
# lib_version NAME: the versioned file name of NAME in the CUDA library folders found above.
lib_version() {
  local f
  f=$(find ${cudalibs//:/ } -maxdepth 1 -name "$1.*" 2>/dev/null | head -n 1)
  if [ -n "$f" ]; then basename "$f"; else echo "$1 (version unknown)"; fi
}
cudalibs=${cudalibs:-}
{
  echo "# card: $card"
  echo "# libraries: $(lib_version libnccl.so.2), $(lib_version libcublas.so.13), CUDA runtime $(cat "${BUNDLE:-.}/CUDART" 2>/dev/null || echo "of the build"); charm $(cat "${BUNDLE:-.}/COMMIT" 2>/dev/null || git rev-parse --short HEAD)"
} >"$KCSV"
for d in 64 128 256; do
  step "kernel-csv-d$d" 120 "$CHARM" bench-kernels --backend cuda -o "$LOGS/kernels-d$d.csv" --head-dim $d --heads 8 \
    --tokens 1024,2048,4096,8192,16384,32768 --mask full,causal --pass both --repeats 7 --warmup 2
  if [ $d = 64 ]; then cat "$LOGS/kernels-d$d.csv" >>"$KCSV"; else grep -v '^#' "$LOGS/kernels-d$d.csv" | tail -n +2 >>"$KCSV"; fi
done

# 6. Timing at S = 32k, 8 ranks on one GPU (no --check: the fp64 reference would take minutes).
time_rows=()
for algo in ring charm; do
  for pass in fwd bwd; do
    layout=contiguous
    [ $algo = charm ] && layout=zigzag
    name="time-$algo-$pass"
    step "$name" 90 "$CHARM" run --backend cuda-local --algo "$algo" --ranks 8 --batch 1 --seq 32k --heads 32 \
      --head-dim 128 --dtype bf16 --causal --layout $layout --pass $pass --json --timeout-s 60 --warmup 1 \
      --trace "$LOGS/trace-$algo-$pass.json"
    f="$LOGS/$name.log"
    time_rows+=("| $algo | $pass | $(json_field time_ms "$f") | $(json_field exposed_comm_ms "$f") | $(json_field enqueue_ms "$f") |")
  done
done

{
  echo "## GPU check ($(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown))"
  echo
  echo "Card: ${card:-unknown}"
  echo
  echo "| step | result | time |"
  echo "|---|---|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "cuda-local --check, 8 ranks, B=1 S=1k H=8 D=64 bf16 causal (max relative error, tolerance 1e-2):"
  echo
  echo "| algo | layout | pass | kv heads | out | dq | dk | dv | time ms |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${check_rows[@]}"
  echo
  echo "Block kernels (bf16, B=1, one block; FLOPs counted on visible pairs):"
  echo
  echo '```'
  grep -E '^(block|Benchmark|-)' "$LOGS/kernels.log" | grep -v '^-' || true
  echo '```'
  echo
  echo "cuda-local, 8 ranks on one GPU, B=1 S=32k H=32 D=128 bf16 causal (ms):"
  echo
  echo "| algo | pass | time | exposed comm | host enqueue |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${time_rows[@]}"
  echo
  echo "Failed steps: $failed (logs in $LOGS)"
} >"$LOGS/gpu-check.md"
cat "$LOGS/gpu-check.md"
if [ -n "${OUT:-}" ]; then
  # Three files (the device tool returns at most 8): the table, the kernel CSV, and every log and trace
  # in one archive.
  mkdir -p "$OUT" && cp "$LOGS/gpu-check.md" "$KCSV" "$OUT/" && tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$LOGS" .
fi
exit $failed
