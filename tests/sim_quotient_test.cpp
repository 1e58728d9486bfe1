// Quotient simulation: a symmetric plan's representatives, simulated alone, give
// every figure the full plan gives (makespan, each rank's times and peak memory,
// each channel's bytes, busy time and flows), on every preset the symmetry holds on.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "scheduler/ir/symmetry.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {
namespace {

using ir::RankSymmetry;

struct Case {
  std::string name;
  topo::Topology topology;
};

topo::Topology load(const std::string& path) {
  auto t = topo::load_topology(path);
  EXPECT_TRUE(t.ok()) << path << ": " << (t.ok() ? "" : t.error().message());
  return t.ok() ? std::move(t).value() : topo::Topology{};
}

/// Every preset, the generator form at 4 and 8 nodes, and uniform clusters.
std::vector<Case> topologies() {
  std::vector<Case> v;
  // Paths by fmt::format: GCC 12 takes `root + dir` for an out-of-bounds copy (-Warray-bounds).
  const std::string root = fmt::format("{}/topologies", CHARM_SOURCE_DIR);
  for (const auto* dir : {"", "/nominal"})
    for (const auto& e : std::filesystem::directory_iterator(fmt::format("{}{}", root, dir)))
      if (e.path().extension() == ".json") v.push_back({e.path().filename().string() + dir, load(e.path().string())});
  for (int nodes : {4, 8}) {
    auto j = topo::read_topology_json(fmt::format("{}/nominal/h100-2x8.json", root));
    EXPECT_TRUE(j.ok());
    (*j)["nodes"] = nodes;
    auto t = topo::parse_topology(*j, "h100.json");
    EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.error().message());
    v.push_back({fmt::format("h100-{}x8", nodes), std::move(t).value()});
  }
  for (int n : {8, 32}) v.push_back({fmt::format("uniform-{}", n), topo::make_uniform(n, 50, 300, 5)});
  return v;
}

double rel(double a, double b) { return std::abs(a - b) / std::max({std::abs(a), std::abs(b), 1e-300}); }

/// The largest relative difference between the two results' figures (0: identical).
double max_difference(const SimResult& full, const SimResult& q, std::string& where) {
  double worst = 0;
  auto see = [&](double a, double b, const std::string& what) {
    const double d = rel(a, b);
    if (d > worst) {
      worst = d;
      where = fmt::format("{}: full {} vs quotient {}", what, a, b);
    }
  };
  see(full.makespan_s, q.makespan_s, "makespan");
  see(full.last_rank, q.last_rank, "last rank");
  for (std::size_t r = 0; r < full.ranks.size(); ++r) {
    const auto &a = full.ranks[r], &b = q.ranks[r];
    see(a.compute_busy_s, b.compute_busy_s, fmt::format("rank {} compute busy", r));
    see(a.exposed_comm_s, b.exposed_comm_s, fmt::format("rank {} exposed comm", r));
    see(a.idle_s, b.idle_s, fmt::format("rank {} idle", r));
    see(a.end_s, b.end_s, fmt::format("rank {} end", r));
    see(double(a.peak_mem_bytes), double(b.peak_mem_bytes), fmt::format("rank {} peak memory", r));
  }
  for (std::size_t c = 0; c < full.channels.size(); ++c) {
    const auto &a = full.channels[c], &b = q.channels[c];
    see(a.bytes, b.bytes, fmt::format("channel {} bytes", c));
    see(a.busy_s, b.busy_s, fmt::format("channel {} busy", c));
    see(a.max_flows, b.max_flows, fmt::format("channel {} flows", c));
  }
  return worst;
}

TEST(SimQuotient, EveryFigureOfTheFullPlanOnEveryPreset) {
  int compared = 0, unsupported = 0;
  double worst = 0;
  for (const auto& [name, t] : topologies()) {
    for (const std::string& algo : sched::algorithm_names()) {
      // The last case: packed documents of two shards each, which repeat every two ranks.
      for (auto [pass, causal, documents] :
           {std::tuple{ir::PassKind::Fwd, false, false}, std::tuple{ir::PassKind::Both, false, false},
            std::tuple{ir::PassKind::Both, true, false}, std::tuple{ir::PassKind::Both, true, true}}) {
        ir::Workload w;
        w.causal = causal;
        if (causal && !documents) w.layout = ir::Layout::Zigzag;
        w.seq = 16384;
        const int gpus = t.num_gpus();
        if (documents && gpus % 2 == 0) w.documents.assign(std::size_t(gpus / 2), w.seq / (gpus / 2));
        w.heads = 64;  // every rank count here divides it: Ulysses runs on each topology
        w.kv_heads = 64;
        w.head_dim = 64;
        w.pass = pass;
        const int ranks = t.num_gpus();
        auto req = sched::normalised({algo, w, ranks, default_domains(t, ranks)});
        if (!sched::check_request(req)) continue;
        // By label, or by cost where the GPU prices the zigzag halves alike (the uniform clusters here).
        const RankSymmetry s = simulation_symmetry(req, t);
        if (!s.active()) {
          ++unsupported;
          continue;
        }
        auto full = sched::make_plan(req);
        ASSERT_TRUE(full.ok());
        const ir::Plan quotient = ir::quotient_of(*full, s);
        const auto model = compute_model_for(t, w);
        auto a = simulate(*full, t, model);
        auto b = simulate(quotient, t, model);
        ASSERT_TRUE(a.ok()) << a.error().message();
        ASSERT_TRUE(b.ok()) << name << " " << algo << ": " << b.error().message();
        std::string where;
        const double d = max_difference(*a, *b, where);
        EXPECT_LE(d, 1e-9) << name << " " << algo << " " << to_string(pass) << " blocks of " << s.block << ": "
                           << where;
        // The bottleneck's traffic counts the images of the quotient's sends.
        const auto ea = explain(*full, *a, t), eb = explain(quotient, *b, t);
        EXPECT_EQ(ea.bottleneck.line(), eb.bottleneck.line()) << name << " " << algo;
        // The class's critical path is one of the full plan's: it ends with the run (where several
        // tie, the walk may take another, so its shares are not compared).
        ASSERT_FALSE(b->critical_path.empty());
        EXPECT_EQ(b->end_s[std::size_t(b->critical_path.back())], b->makespan_s) << name << " " << algo;
        worst = std::max(worst, d);
        ++compared;
      }
    }
  }
  std::cout << fmt::format("{} quotient simulations compared ({} on topologies without the symmetry); largest "
                           "relative difference {:.3g}\n",
                           compared, unsupported, worst);
  EXPECT_GE(compared, 30);
}

}  // namespace
}  // namespace charm::sim
