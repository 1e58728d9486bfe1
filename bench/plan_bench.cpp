// Planner and validator at cluster scale: make_plan, validate and the simulator's (lean) PlanIndex for ring
// and charm, fwd / bwd / both, N = 8 .. 1024 (bench/scale_cases.hpp).
// Counters: ops (plan size), items/s (= ops/s), plan_B/op (heap bytes the plan
// holds per op), rss_MB (process high-water; meaningful when one case runs alone).
#include "bench/scale_cases.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/validate/validator.hpp"

namespace {

using namespace charm;

void plan_case(benchmark::State& state, sched::PlanRequest req) {
  std::size_t ops = 0, bytes = 0;
  for (auto _ : state) {
    auto p = bench::plan_of(req);
    ops = p.size();
    bytes = p.memory_bytes();
    benchmark::DoNotOptimize(p.ops().data());
  }
  state.SetItemsProcessed(std::int64_t(ops) * state.iterations());
  state.counters["ops"] = double(ops);
  state.counters["plan_B/op"] = double(bytes) / double(ops);
  state.counters["rss_MB"] = bench::max_rss_bytes() / 1e6;
}

void validate_case(benchmark::State& state, sched::PlanRequest req) {
  const auto p = bench::plan_of(req);
  for (auto _ : state) {
    auto rep = sched::validate(p);
    if (!rep.ok()) bench::die(rep.summary(p));
    benchmark::DoNotOptimize(rep.ops);
  }
  state.SetItemsProcessed(std::int64_t(p.size()) * state.iterations());
  state.counters["ops"] = double(p.size());
  state.counters["rss_MB"] = bench::max_rss_bytes() / 1e6;
}

void index_case(benchmark::State& state, sched::PlanRequest req) {
  const auto p = bench::plan_of(req);
  for (auto _ : state) {
    const ir::PlanIndex idx(p, nullptr, ir::PlanIndex::Parts::Lean);
    benchmark::DoNotOptimize(idx.stream_order().data());
  }
  state.SetItemsProcessed(std::int64_t(p.size()) * state.iterations());
  state.counters["ops"] = double(p.size());
}

const bool registered = [] {
  for (const char* what : {"plan", "validate", "index"})
    for (const char* algo : bench::kAlgos)
      for (auto pass : bench::kPasses)
        for (int n : bench::kSizes) {
          auto req = bench::request(algo, pass, n);
          const std::string_view w = what;
          auto* b = benchmark::RegisterBenchmark(bench::case_name(what, algo, pass, n).c_str(),
                                                 w == "plan"       ? plan_case
                                                 : w == "validate" ? validate_case
                                                                   : index_case,
                                                 req);
          bench::shape(b, n);
        }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
