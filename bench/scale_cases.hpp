#pragma once
// The cluster-scale cases shared by plan_bench and sim_bench (bench/RESULTS.md,
// "Planner and simulator at cluster scale"): ring and charm, fwd / bwd / both,
// on N = 8, 64, 256, 1024 ranks in domains of 8 on an H100-like cluster
// (NVLink 365.1 GB/s inside a node, 42.5 GB/s per-GPU NIC across, 989 TFLOPS).

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <fmt/format.h>
#include <string>

#include "scheduler/planners/planners.hpp"

namespace charm::bench {

inline constexpr int kSizes[] = {8, 64, 256, 1024};
inline constexpr const char* kAlgos[] = {"ring", "charm"};
inline constexpr ir::PassKind kPasses[] = {ir::PassKind::Fwd, ir::PassKind::Bwd, ir::PassKind::Both};

/// The request of one case: 1M tokens (divisible by every size), non-causal.
inline sched::PlanRequest request(const std::string& algo, ir::PassKind pass, int n) {
  sched::PlanRequest r;
  r.algo = algo;
  r.ranks = n;
  r.domains = algo == "charm" ? n / 8 : 1;
  r.workload.seq = 1 << 20;
  r.workload.heads = 32;
  r.workload.kv_heads = 32;
  r.workload.pass = pass;
  return r;
}

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "bench: %s\n", what.c_str());
  std::abort();
}

inline ir::Plan plan_of(const sched::PlanRequest& r) {
  auto p = sched::make_plan(r);
  if (!p) die(p.error().message());
  return std::move(p).value();
}

/// Process-wide resident-set high-water mark (only meaningful for a case run alone).
inline double max_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) * 1024.0;
}

/// "<what>/<algo>/<pass>/n:<N>": the CI smoke test filters on "n:8$".
inline std::string case_name(const char* what, const std::string& algo, ir::PassKind pass, int n) {
  return fmt::format("{}/{}/{}/n:{}", what, algo, ir::to_string(pass), n);
}

/// Large cases run once; the small ones as often as Google Benchmark likes.
inline void shape(benchmark::internal::Benchmark* b, int n) {
  b->Unit(benchmark::kMillisecond)->UseRealTime();
  if (n >= 256) b->Iterations(1);
}

}  // namespace charm::bench
