// Explanations (sim/explain.hpp) and the advisor (sim/advise.hpp): what bounds a run,
// where its critical path goes, the memory verdict, and the ranking of candidates.
#include <gtest/gtest.h>

#include <numeric>
#include <set>

#include "sim/advise.hpp"
#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "topologies/topology_json.hpp"

namespace {

using namespace charm;

ir::Workload workload(std::int64_t seq, std::int64_t heads, std::int64_t kv_heads,
                      ir::PassKind pass = ir::PassKind::Fwd) {
  ir::Workload w;
  w.batch = 1;
  w.seq = seq;
  w.heads = heads;
  w.kv_heads = kv_heads;
  w.head_dim = 128;
  w.dtype = ir::DType::BF16;
  w.pass = pass;
  return w;
}

sim::Evaluation eval(const std::string& algo, const ir::Workload& w, const topo::Topology& t, int ranks,
                     int domains = 1) {
  auto ev = sim::evaluate({algo, w, ranks, domains}, t);
  EXPECT_TRUE(ev) << ev.error().message();
  return std::move(ev).value();
}

double path_total(const sim::Explanation& e) {
  return std::accumulate(e.path.begin(), e.path.end(), 0.0,
                         [](double a, const sim::PathShare& p) { return a + p.seconds; });
}

TEST(Explain, SlowComputeIsTheBottleneck) {
  // 8 ranks at 10 TFLOP/s and 1 TB/s links: a 4k-token forward block of 8 heads x 128 is
  // 4 * 1024^2 * 1024 flops = 4.3 GFLOP, 0.43 ms, while its 4 MB K+V shard moves in 4 us.
  const auto t = topo::make_uniform(8, 1000, 10);
  const auto ev = eval("ring", workload(8192, 8, 8), t, 8);
  const auto e = sim::explain(ev.plan, ev.result, t);
  EXPECT_EQ(e.bottleneck.resource_class, "compute");
  EXPECT_TRUE(e.bottleneck.saturated);
  EXPECT_GT(e.bottleneck.utilisation, 0.95);
  EXPECT_NEAR(path_total(e), ev.result.makespan_s, 1e-9 * ev.result.makespan_s);
  EXPECT_EQ(e.path.front().what, "compute");
  EXPECT_NE(e.bottleneck.line().find("TFLOP"), std::string::npos) << e.bottleneck.line();
}

TEST(Explain, SlowLinkCarriesTheKvShards) {
  // Same run at 1 GB/s and 1 PFLOP/s: every step waits for a 4,194,304-byte K+V shard
  // (1024 tokens x 8 heads x 128 x 2 bytes, K and V). Each GPU's uplink carries its 7 sends.
  const auto t = topo::make_uniform(8, 1, 1e6);
  const auto ev = eval("ring", workload(8192, 8, 8), t, 8);
  const auto e = sim::explain(ev.plan, ev.result, t);
  EXPECT_EQ(e.bottleneck.resource_class, "link");
  EXPECT_TRUE(e.bottleneck.saturated);
  ASSERT_EQ(e.bottleneck.traffic.size(), 1u);
  EXPECT_EQ(e.bottleneck.traffic[0].kind, ir::BufKind::Kv);
  EXPECT_EQ(e.bottleneck.traffic[0].messages, 7);
  EXPECT_DOUBLE_EQ(e.bottleneck.traffic[0].bytes, 7 * 4194304.0);
  EXPECT_EQ(e.path.front().what, "link");
  EXPECT_NEAR(path_total(e), ev.result.makespan_s, 1e-9 * ev.result.makespan_s);
  EXPECT_EQ(e.bottleneck.line().find("GQA"), std::string::npos);
}

TEST(Explain, GqaQueriesOutweighTheirKeys) {
  // CHARM+ ships queries across domains; with 64 query heads on 8 kv heads a query shard is
  // 64 / (2 x 8) = 4x a K+V shard, which is what makes it lose under GQA.
  const auto t = topo::make_uniform(8, 10, 1000);
  const auto ev = eval("charm", workload(16384, 64, 8), t, 8, 2);
  const auto e = sim::explain(ev.plan, ev.result, t);
  EXPECT_TRUE(e.bottleneck.saturated);
  bool ships_q = false;
  for (const auto& k : e.bottleneck.traffic) ships_q |= k.kind == ir::BufKind::Q;
  EXPECT_TRUE(ships_q) << e.bottleneck.line();
  EXPECT_NE(e.bottleneck.line().find("GQA 8:1: a query shard is 4.0x a KV shard"), std::string::npos)
      << e.bottleneck.line();
}

TEST(Explain, MemoryVerdict) {
  topo::GpuSpec g;
  g.memory_gb = 80;
  auto v = sim::memory_verdict(2'000'000'000, 79, g);
  EXPECT_TRUE(v.known);
  EXPECT_FALSE(v.fits);
  EXPECT_DOUBLE_EQ(v.need_gb, 81);
  EXPECT_NE(v.line().find("DOES NOT FIT"), std::string::npos);
  v = sim::memory_verdict(2'000'000'000, 78, g);
  EXPECT_TRUE(v.fits);
  g.memory_gb = 0;
  v = sim::memory_verdict(2'000'000'000, 1000, g);
  EXPECT_FALSE(v.known);
  EXPECT_TRUE(v.fits);
}

TEST(Advise, RanksEveryCandidateOnceByTotalTime) {
  auto t = topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json");
  ASSERT_TRUE(t) << t.error().message();
  ir::Workload w = workload(32768, 16, 16, ir::PassKind::Both);
  w.causal = true;
  sim::AdviseOptions opt;
  opt.jobs = 2;
  auto a = sim::advise(w, *t, opt);
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_GE(a->candidates.size(), 3u);
  std::set<std::string> labels;
  for (std::size_t i = 0; i < a->candidates.size(); ++i) {
    const auto& c = a->candidates[i];
    EXPECT_TRUE(labels.insert(c.label()).second) << "twice: " << c.label();
    ASSERT_TRUE(c.fwd && c.bwd) << c.label();
    EXPECT_DOUBLE_EQ(c.total_ms, c.fwd->time_ms + c.bwd->time_ms);
    EXPECT_EQ(c.peak_mem_bytes, std::max(c.fwd->peak_mem_bytes, c.bwd->peak_mem_bytes));
    EXPECT_TRUE(c.memory.known);
    EXPECT_FALSE(c.bottleneck.empty());
    if (i > 0) {
      EXPECT_LE(a->candidates[i - 1].total_ms, c.total_ms);
    }
    // ring-zigzag is ring [zigzag]: listed once, as ring.
    EXPECT_NE(c.algo, "ring-zigzag");
  }
  // Both layouts of ring, three domain splits (2, 4, 8) of charm on 16 GPUs per layout.
  EXPECT_TRUE(labels.count("ring [contiguous]") && labels.count("ring [zigzag]"));
  for (const char* d : {"2", "4", "8"}) EXPECT_TRUE(labels.count(std::string("charm d=") + d + " [zigzag]")) << d;
  // TASP has no backward: refused with the planner's reason, not ranked.
  bool tasp_refused = false;
  for (const auto& r : a->refused)
    tasp_refused |= r.label.starts_with("tasp") && r.reason.find("backward") != std::string::npos;
  EXPECT_TRUE(tasp_refused);
  // The same answer whatever the number of workers.
  opt.jobs = 1;
  auto b = sim::advise(w, *t, opt);
  ASSERT_TRUE(b);
  ASSERT_EQ(a->candidates.size(), b->candidates.size());
  for (std::size_t i = 0; i < a->candidates.size(); ++i) {
    EXPECT_EQ(a->candidates[i].label(), b->candidates[i].label());
    EXPECT_EQ(a->candidates[i].total_ms, b->candidates[i].total_ms);
  }
}

TEST(Advise, ReservedMemoryTurnsTheVerdict) {
  auto t = topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json");
  ASSERT_TRUE(t);
  sim::AdviseOptions opt;
  opt.algos = {"ring"};
  opt.reserved_gb = 79.9;
  auto a = sim::advise(workload(262144, 16, 16, ir::PassKind::Fwd), *t, opt);
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_EQ(a->candidates.size(), 1u);
  EXPECT_FALSE(a->candidates[0].memory.fits) << a->candidates[0].memory.line();
  EXPECT_FALSE(a->candidates[0].bwd.has_value());
}

// A candidate over the memory budget is refused with the budget's own line (the one simulate says), its
// estimate the one simulate judges by (sched::simulation_bytes), not simulated.
TEST(Advise, ACandidateOverTheBudgetIsRefusedWithTheBudgetsLine) {
  const auto t = topo::make_uniform(8, 100, 100);
  sim::AdviseOptions opt;
  opt.algos = {"ring"};
  opt.budget = {1e3, "a test budget"};
  auto a = sim::advise(workload(8192, 8, 8), t, opt);
  ASSERT_TRUE(a) << a.error().message();
  EXPECT_TRUE(a->candidates.empty());
  ASSERT_FALSE(a->refused.empty());
  for (const auto& r : a->refused) {
    EXPECT_NE(r.reason.find("its plan and simulation (about"), std::string::npos) << r.reason;
    EXPECT_NE(r.reason.find("more than the 1e-06 GB budget (a test budget)"), std::string::npos) << r.reason;
  }
}

TEST(Advise, UnknownAlgorithmIsAnError) {
  const auto t = topo::make_uniform(8, 100, 100);
  sim::AdviseOptions opt;
  opt.algos = {"chram"};
  auto a = sim::advise(workload(8192, 8, 8), t, opt);
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().field, Field::Algos);
}

}  // namespace
