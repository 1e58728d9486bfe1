#!/usr/bin/env bash
# Sanitizer stages (CI and local). Usage: scripts/sanitize.sh [asan|tsan|all]
#   asan: everything but CUDA and the benchmarks, built with -DCHARM_SANITIZE=address,undefined
#         (and the fuzz targets, with clang), then the whole CTest suite (MPI included) under
#         ASan + UBSan + LeakSanitizer.
#   tsan: the code with threads of its own, built with -DCHARM_SANITIZE=thread: the CPU executors
#         (the kernels, the planner x shape grid through the threads backend, the watchdog),
#         parallel_for, the calibration that runs its starts, refits and rows on it, and the balanced
#         layout's chunk solver that simulates its candidates side by side. Not the
#         command line: `charm run` adds no thread to the executor's, and its sources (tools/) took 147
#         of the TSan build's 507 s of CPU (2026-12-05). CHARM_TSAN_GRID_FILTER
#         (a --gtest_filter) limits the grid, e.g. to its 4-rank cases in CI.
# -O1 -g1: a third faster to compile than -O2 -g and still gives file:line in reports.
# Build dirs: build-asan, build-tsan (not the README's ./build).
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-all}
jobs=$(nproc)
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" -DCHARM_WITH_CUDA=OFF -DCHARM_BUILD_BENCH=OFF)
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Open MPI keeps its own allocations for the life of the process; they are not ours.
export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

if [[ $stage == asan || $stage == all ]]; then
  t0=$SECONDS
  # clang: instrumenting for ASan + UBSan, it compiles this tree in about 30% less time than GCC
  # (validator.cpp 15 s against 23 s, routes_test.cpp 17 s against 29 s, at -O1 -g1), and it is
  # installed anyway for the fuzz stage. GCC is used when clang is not there.
  # With clang the same build also holds the libFuzzer targets (coverage instrumentation everywhere,
  # -DCHARM_FUZZ=ON): `FUZZ_BUILD_DIR=build-asan scripts/fuzz.sh` then fuzzes without a build of its
  # own, which saves CI a third clang build of the libraries (about 200 s on 2 cores).
  asan_cc=()
  command -v clang++ >/dev/null && asan_cc=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCHARM_FUZZ=ON)
  cmake -S . -B build-asan "${common[@]}" "${asan_cc[@]}" -DCHARM_SANITIZE=address,undefined >/dev/null
  # The log in full only when the build fails (the last line alone hid which file broke).
  cmake --build build-asan -j"$jobs" > build-asan/build.log 2>&1 || { grep -E -A5 "FAILED|error" build-asan/build.log | head -60; exit 1; }
  tail -1 build-asan/build.log
  echo "sanitize: asan build $((SECONDS - t0)) s" >&2
  t0=$SECONDS
  # The planners' and closed forms' grids at 8 ranks and more run in stage 1; under ASan, whose
  # cost grows with ranks x tokens, their 2- and 4-rank cases cover the same code paths (the
  # planners' 8-rank cases with 4 domains stay: charm and usp take their multi-domain branches
  # there). The executor grid runs every case, on the small workload the sanitizers get
  # (runtime_grid_test.cpp): 346 cases in about 18 s of CPU. Three cases that stage 1 runs stay out here:
  # two timing tests, whose computations are sized to outlast a watchdog and take 40 s each under ASan,
  # and the 2,000-configuration sweep (31 s; the smaller sweeps cover the same code). CHARM_ASAN_FILTER
  # overrides.
  timing=CliRun.OneComputeLongerThanTheTimeoutIsNoStall:Sweep.TwoThousandConfigurationsOneRowPerConfigAlgoPass
  # Ten more that stage 1 runs stay out here too, each over 19 s under ASan (the first nine 358 s of CPU, measured
  # 2026-12-05): bit-for-bit equality of figures over many configurations (the sweep's shared simulations,
  # every quotient figure on every preset, sweep outputs against the job count, the comm list against
  # Algorithm 1, 1,200 metamorphic pairs), a calibration's full report, the event queue's keyed-event property
  # over a million pushes, a linearithmic-time check (a timing test), and the extreme-range CLI grid. Their
  # code runs under ASan in the smaller cases of the same suites (SweepEngine.PlansReused..., Symmetry.*,
  # Sweep.RowsDoNotDependOnJobs, Calibrate.*, EventQueue.MatchesASortedReference..., SimCli.*).
  heavy=SweepEngine.ConfigurationsThatAreOneSimulationShareItsFiguresBitForBit:SimQuotient.EveryFigureOfTheFullPlanOnEveryPreset
  heavy+=:CalibrateCli.JsonReportAndALoadableTopology:Determinism.SweepOutputsAreTheSameWithAnyJobs
  heavy+=:EventQueue.KeyedEventsLeaveAsAFreshPushWouldWithTheOldOneSkipped:JsonText.ManyKeysAreCheckedInLinearithmicTime
  heavy+=:CliCommlist.MatchesAlgorithm1:SimCli.NoInfOrNanAtTheEdgesOfThePlausibleRanges
  heavy+=:Metamorphic.RaisingOneHardwareFigureNeverMakesARunSlower
  # ... and the 200 random THD document sets (runtime_mask_test took 89 s under ASan with them, 44 s before):
  # MaskExact runs THD for every algorithm here; the same for the 200 random chunk maps of the balanced layout
  # (TheRingStopsAtTheLastReader stays).
  heavy+=:ThdLayout.RandomDocumentSetsAreExactAndBalanced:BalancedLayout.RandomChunkMapsAreExact
  # ... and symmetry_test's three largest (93 s under ASan with them; 1.5 of its 2.3 s in stage 1): charm's
  # plans against the symmetry checker and the quotient planner, and the masked plan's estimate. The other
  # algorithms' cases run the same checker, quotient planner and estimate here.
  heavy+=:Symmetry/EveryAlgorithm.PlanSymmetryIsWhatTheCheckerProves/charm
  heavy+=:Symmetry/EveryAlgorithm.QuotientPlansEqualTheFullPlansQuotients/charm:EstimatePlan.CountsTheMaskedPlan
  timing+=:$heavy
  GTEST_FILTER=${CHARM_ASAN_FILTER:--*_n8_d1_*:*_n8_d2_*:*_n12_*:*_n16_*:*_n24_*:*_n32_*:*_n64_*:$timing} \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 -LE mpi -E runtime_grid_test
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 -R runtime_grid_test
  # Under mpirun, Open MPI's own allocations (8 KiB blocks from its transport setup) show up
  # as direct leaks in every rank; the MPI tests keep ASan and UBSan but not LeakSanitizer.
  # The stopped-peer case is a timing test (it runs in stage 1): under ASan a process can still be
  # inside MPI_Init when the test stops it 5 s in, and a peer stopped there, before any code of ours
  # runs, hangs the job (no watchdog can cover MPI_Init). The long-computation case is a timing test
  # too (45 s under ASan, its computation sized to outlast the watchdog), also run in stage 1.
  # Eight ranks under ASan on 2 cores take 14-28 s a case: of the four algorithms' cases (all run in stage 1), the
  # causal charm one (case2, the most intricate schedule) stays; the others repeat its transport code.
  mpi_heavy=Algos/MpiRun.EightRanksMatchTheReference/case0:Algos/MpiRun.EightRanksMatchTheReference/case1
  mpi_heavy+=:Algos/MpiRun.EightRanksMatchTheReference/case3
  # mpirun refuses to run as root without these (CI containers run as root).
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=${ASAN_OPTIONS/detect_leaks=1/detect_leaks=0} \
    GTEST_FILTER=-MpiWatchdog.AStoppedPeerIsAStallOnTheOthers:MpiWatchdog.ALongComputationOnAPeerIsProgress:$mpi_heavy \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 -L mpi
  echo "sanitize: asan tests $((SECONDS - t0)) s" >&2
fi

if [[ $stage == tsan || $stage == all ]]; then
  t0=$SECONDS
  cmake -S . -B build-tsan "${common[@]}" -DCHARM_SANITIZE=thread -DCHARM_WITH_MPI=OFF >/dev/null
  tsan_tests=(runtime_kernels_test runtime_grid_test parallel_for_test calibration_test chunk_solver_test)
  cmake --build build-tsan -j"$jobs" --target "${tsan_tests[@]}" > build-tsan/build.log 2>&1 ||
    { grep -E -A5 "FAILED|error" build-tsan/build.log | head -60; exit 1; }
  tail -1 build-tsan/build.log
  echo "sanitize: tsan build $((SECONDS - t0)) s" >&2
  t0=$SECONDS
  # The test binaries directly (ctest would list the suites this build skipped), two shards at a time.
  for t in "${tsan_tests[@]}"; do
    pids=()
    for ((i = 0; i < jobs; ++i)); do
      filter='*'
      [[ $t == runtime_grid_test ]] && filter=${CHARM_TSAN_GRID_FILTER:-*}
      GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i build-tsan/tests/$t --gtest_brief=1 --gtest_filter="$filter" > "build-tsan/$t.$i.log" 2>&1 &
      pids+=($!)
    done
    for ((i = 0; i < jobs; ++i)); do
      wait "${pids[$i]}" || { cat "build-tsan/$t.$i.log"; echo "sanitize: $t failed under TSan" >&2; exit 1; }
    done
    echo "sanitize: tsan $t passed" >&2
  done
  echo "sanitize: tsan tests $((SECONDS - t0)) s" >&2
fi
