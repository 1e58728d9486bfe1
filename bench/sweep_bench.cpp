// Sweep throughput: configurations evaluated per second with 1 and 2 worker
// threads (each configuration: every algorithm, forward and backward, on an
// 8-GPU topology). Results go to bench/RESULTS.md, "Sweep throughput".
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

#include "sim/sweep.hpp"
#include "topologies/topology_json.hpp"

namespace {

charm::sim::SweepSpec spec() {
  charm::sim::SweepSpec s;
  for (const char* f : {"l20-8-2numa.json", "h20-8.json"}) {
    auto t = charm::topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/" + f);
    if (!t) {
      std::fprintf(stderr, "sweep_bench: %s\n", t.error().message().c_str());
      std::abort();
    }
    s.topologies.push_back(std::move(t).value());
  }
  s.batch = {1, 2, 4};
  s.seq = {4096, 16384, 65536};
  s.heads = {8, 32};
  s.head_dim = {64, 128};
  s.causal = {false, true};
  s.algos = {"ring", "ring-zigzag", "merge", "rm+", "charm", "allgather-kv"};
  s.passes = {charm::ir::Phase::Fwd, charm::ir::Phase::Bwd};
  return s;  // 2 x 3 x 3 x 2 x 2 x 2 = 144 configurations, 1,728 simulations
}

void BM_Sweep(benchmark::State& state) {
  const auto s = spec();
  const int jobs = static_cast<int>(state.range(0));
  charm::sim::SweepControl control;
  control.jobs = jobs;
  std::size_t configs = 0, sims = 0;
  for (auto _ : state) {
    const auto res = charm::sim::run_sweep(s, control);
    benchmark::DoNotOptimize(res.rows.data());
    configs += res.configs;
    sims += res.simulations;
  }
  state.counters["configs/s"] = benchmark::Counter(double(configs), benchmark::Counter::kIsRate);
  state.counters["sims/s"] = benchmark::Counter(double(sims), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sweep)->ArgName("jobs")->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

}  // namespace

BENCHMARK_MAIN();
