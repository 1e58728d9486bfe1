// Sweep throughput: configurations evaluated per second with 1 and 2 worker
// threads. BM_Sweep: every algorithm of the 6 below, forward and backward, on two
// 8-GPU topologies; BM_Sweep16: the same 12 simulations per configuration on the
// 16-GPU h100-2x8 (the scale target of bench/RESULTS.md), and causal. Built with the CLI's
// allocation policy (tools/large_pages.cpp), so the figures are `charm sweep`'s.
#include <benchmark/benchmark.h>

#include <cstdio>
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

/// Runs one sweep per iteration and counts configurations and simulations per second of wall time
/// (arguments: jobs, and whether configurations that are one simulation share it: on unless 0).
void run_sweeps(benchmark::State& state, const charm::sim::SweepSpec& s) {
  charm::sim::SweepControl control;
  control.jobs = static_cast<int>(state.range(0));
  control.share_simulations = state.range(1) != 0;
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

/// The runs of a sweep benchmark: (jobs, share) pairs, milliseconds of wall time, at least 2 s each.
void timed(benchmark::internal::Benchmark* b) {
  b->ArgNames({"jobs", "share"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
}
void one_and_two_jobs(benchmark::internal::Benchmark* b) {
  timed(b);
  b->Args({1, 1})->Args({2, 1});
}
void with_and_without_sharing(benchmark::internal::Benchmark* b) {
  timed(b);
  b->Args({2, 0})->Args({2, 1});
}

void BM_Sweep(benchmark::State& state) { run_sweeps(state, spec()); }
BENCHMARK(BM_Sweep)->Apply(one_and_two_jobs);

charm::sim::SweepSpec spec16() {
  charm::sim::SweepSpec s = spec();
  s.topologies.clear();
  auto t = charm::topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json");
  if (!t) {
    std::fprintf(stderr, "sweep_bench: %s\n", t.error().message().c_str());
    std::abort();
  }
  s.topologies.push_back(std::move(t).value());
  s.batch = {1, 2, 4, 8};
  s.seq = {4096, 8192, 16384, 32768, 65536, 131072};
  s.heads = {8, 16, 32};
  s.head_dim = {64, 128};
  s.causal = {false};
  return s;  // 4 x 6 x 3 x 2 = 144 configurations of 16 ranks, 1,728 simulations
}

void BM_Sweep16(benchmark::State& state) { run_sweeps(state, spec16()); }
BENCHMARK(BM_Sweep16)->Apply(one_and_two_jobs);

/// The causal 16-rank sweeps of the scale target, contiguous and zigzag (`--causal [--layout zigzag]`), with
/// and without configurations sharing their simulation (its batches x heads repeat products: half share).
charm::sim::SweepSpec spec16_causal(charm::ir::Layout layout) {
  charm::sim::SweepSpec s = spec16();
  s.causal = {true};
  s.layouts = {layout};
  return s;
}
void BM_Sweep16Causal(benchmark::State& state) { run_sweeps(state, spec16_causal(charm::ir::Layout::Contiguous)); }
void BM_Sweep16CausalZigzag(benchmark::State& state) { run_sweeps(state, spec16_causal(charm::ir::Layout::Zigzag)); }
BENCHMARK(BM_Sweep16Causal)->Apply(with_and_without_sharing);
BENCHMARK(BM_Sweep16CausalZigzag)->Apply(with_and_without_sharing);

}  // namespace

BENCHMARK_MAIN();
