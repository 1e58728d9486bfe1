// Simulator at cluster scale, and the end-to-end figure the targets are about:
// plan + validate + simulate (what `charm simulate` does for one algorithm),
// ring and charm, fwd / bwd / both, N = 8 .. 1024 (bench/scale_cases.hpp).
// Counters: ops, items/s (= simulated ops/s), events, rss_MB (process
// high-water; meaningful when one case runs alone), peak_B/op (= rss_MB per op).
// "plan+simulate by symmetry": the quotient `charm simulate --symmetry auto` runs at
// cluster scale (one class of ranks; ops counts the full plan's, simulated_ops the class's).
#include "bench/scale_cases.hpp"
#include "scheduler/validate/validator.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

#include <algorithm>
#include <map>

namespace {

using namespace charm;

/// (N/8) nodes x 8 H100 in the generator form of docs/topology.md; built once per size.
const topo::Topology& h100_cluster(int n) {
  static std::map<int, topo::Topology> cache;
  if (auto it = cache.find(n); it != cache.end()) return it->second;
  const std::string text = fmt::format(R"({{"name": "h100-{}x8",
    "gpu": {{"model": "H100", "tflops": {{"bf16": 989.0}}, "hbm_gbps": 3350,
             "efficiency": {{"fwd": 0.5, "bwd": 0.4}}, "half_tokens": 128, "launch_us": 10}},
    "nodes": {}, "gpus_per_node": 8,
    "intra": {{"bandwidth_gbps": 365.1, "latency_us": 3, "sharing": "dedicated"}},
    "inter": {{"bandwidth_gbps": 42.5, "latency_us": 8, "sharing": "shared", "nic": "per_gpu"}}}})",
                                       n / 8, std::max(1, n / 8));
  auto t = topo::parse_topology_text(text, "bench");
  if (!t) bench::die(t.error().message());
  return cache.emplace(n, std::move(t).value()).first->second;
}

void simulate_case(benchmark::State& state, sched::PlanRequest req) {
  const auto& t = h100_cluster(req.ranks);
  const auto p = bench::plan_of(req);
  const auto model = sim::compute_model_for(t, p.workload);
  std::uint64_t events = 0;
  double makespan = 0;
  for (auto _ : state) {
    auto r = sim::simulate(p, t, model);
    if (!r) bench::die(r.error().message());
    events = r->events;
    makespan = r->makespan_s;
  }
  state.SetItemsProcessed(std::int64_t(p.size()) * state.iterations());
  state.counters["ops"] = double(p.size());
  state.counters["events"] = double(events);
  state.counters["makespan_ms"] = makespan * 1e3;
  state.counters["rss_MB"] = bench::max_rss_bytes() / 1e6;
}

void end_to_end_case(benchmark::State& state, sched::PlanRequest req) {
  const auto& t = h100_cluster(req.ranks);
  std::size_t ops = 0;
  for (auto _ : state) {
    auto p = bench::plan_of(req);
    auto rep = sched::validate(p);
    if (!rep.ok()) bench::die(rep.summary(p));
    ops = p.size();
    auto e = sim::evaluate_plan(std::move(p), t);
    if (!e) bench::die(e.error().message());
    benchmark::DoNotOptimize(e->result.makespan_s);
  }
  state.SetItemsProcessed(std::int64_t(ops) * state.iterations());
  state.counters["ops"] = double(ops);
  state.counters["rss_MB"] = bench::max_rss_bytes() / 1e6;
  state.counters["peak_B/op"] = bench::max_rss_bytes() / double(ops);
}

/// What `charm simulate` does by symmetry: the quotient plan (one class of ranks) planned and simulated.
void by_symmetry_case(benchmark::State& state, sched::PlanRequest req) {
  const auto& t = h100_cluster(req.ranks);
  const ir::RankSymmetry q = sim::simulation_symmetry(req, t);
  if (!q.active()) bench::die("no rank symmetry shared by the plan and the topology");
  std::size_t ops = 0;
  for (auto _ : state) {
    auto p = sched::make_plan(req, q);
    if (!p) bench::die(p.error().message());
    ops = p->size();
    auto e = sim::evaluate_plan(std::move(p).value(), t);
    if (!e) bench::die(e.error().message());
    benchmark::DoNotOptimize(e->result.makespan_s);
  }
  state.counters["ops"] = double(ops) * double(q.elements(req.ranks));
  state.counters["simulated_ops"] = double(ops);
  state.counters["classes"] = double(q.elements(req.ranks));
  state.counters["rss_MB"] = bench::max_rss_bytes() / 1e6;
}

/// Loading a generated cluster of n GPUs (n/8 nodes): parse, build, choose every route.
void topology_case(benchmark::State& state, int n) {
  const std::string text = fmt::format(R"({{"gpu": {{"tflops": 989.0}}, "nodes": {}, "gpus_per_node": 8,
    "intra": {{"bandwidth_gbps": 365.1, "latency_us": 3, "sharing": "dedicated"}},
    "inter": {{"bandwidth_gbps": 42.5, "latency_us": 8, "sharing": "shared", "nic": "per_gpu"}}}})",
                                       n / 8);
  double hops = 0;
  for (auto _ : state) {
    auto t = topo::parse_topology_text(text, "bench");
    if (!t) bench::die(t.error().message());
    hops = double(t->route(0, n - 1).size());
  }
  state.counters["gpus"] = n;
  state.counters["hops_0_to_last"] = hops;
  state.counters["rss_MB"] = bench::max_rss_bytes() / 1e6;
}

const bool registered = [] {
  for (int n : {8, 64, 256, 1024, 4096})
    benchmark::RegisterBenchmark(fmt::format("topology/generated/n:{}", n).c_str(), topology_case, n)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  for (const char* what : {"simulate", "plan+validate+simulate"})
    for (const char* algo : bench::kAlgos)
      for (auto pass : bench::kPasses)
        for (int n : bench::kSizes) {
          auto req = bench::request(algo, pass, n);
          auto* b =
              std::string_view(what) == "simulate"
                  ? benchmark::RegisterBenchmark(bench::case_name(what, algo, pass, n).c_str(), simulate_case, req)
                  : benchmark::RegisterBenchmark(bench::case_name(what, algo, pass, n).c_str(), end_to_end_case, req);
          bench::shape(b, n);
        }
  for (const char* algo : bench::kAlgos)
    for (auto pass : bench::kPasses)
      for (int n : {16, 64, 256, 1024, 4096}) {  // 8 GPUs are one node: no block structure
        auto* b = benchmark::RegisterBenchmark(bench::case_name("plan+simulate by symmetry", algo, pass, n).c_str(),
                                               by_symmetry_case, bench::request(algo, pass, n));
        b->Unit(benchmark::kMillisecond)->UseRealTime();
        if (n >= 1024) b->Iterations(3);
      }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
