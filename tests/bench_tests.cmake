# Smoke test of the cluster-scale benchmarks: the N = 8 cases only, briefly
# (the full sizes are run by hand; bench/RESULTS.md). Performance is never asserted.
# bench/ is configured after tests/, so the targets are named, not tested for.
if(CHARM_BUILD_BENCH)
  foreach(b plan_bench sim_bench)
    add_test(NAME bench.${b}.smoke COMMAND ${b} --benchmark_filter=n:8/ --benchmark_min_time=0.01)
    set_tests_properties(bench.${b}.smoke PROPERTIES LABELS bench TIMEOUT 120)
  endforeach()
  # Every stage once at 8 ranks (fails on an invalid plan or a simulator error).
  add_test(NAME bench.scale_stages.smoke COMMAND scale_stages 8 charm both 65536)
  set_tests_properties(bench.scale_stages.smoke PROPERTIES LABELS bench TIMEOUT 120)
endif()
