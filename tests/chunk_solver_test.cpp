// The balanced layout's solver: its chunk maps are valid, it never does worse than TransformerEngine's THD
// layout (a candidate it always tries), its answer is the simulation of the map it returns, and a seed gives
// one answer.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>

#include <random>
#include <string>

#include "sim/chunk_solver.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {
namespace {

topo::Topology h100_2x8() {
  auto t = topo::load_topology(fmt::format("{}/topologies/h100-2x8.json", CHARM_SOURCE_DIR));
  EXPECT_TRUE(t.ok());
  return *t;
}

/// Documents of 2 x ranks-token multiples (THD applies), lengths log-uniform in [lo, hi].
ir::Workload documents(std::mt19937_64& rng, int ranks, std::int64_t lo, std::int64_t hi, std::int64_t seq) {
  ir::Workload w;
  w.heads = w.kv_heads = 8;
  w.causal = true;
  w.layout = ir::Layout::Balanced;
  w.pass = ir::PassKind::Both;
  const std::int64_t unit = 2 * ranks;
  std::uniform_real_distribution<double> u(std::log(double(lo)), std::log(double(hi)));
  for (std::int64_t left = seq; left > 0;) {
    std::int64_t len = std::max<std::int64_t>(unit, std::int64_t(std::exp(u(rng))) / unit * unit);
    len = std::min(len, left);
    w.documents.push_back(len);
    left -= len;
  }
  w.seq = seq;
  return w;
}

TEST(ChunkSolver, NeverSlowerThanThdAndTheAnswerIsItsMapsSimulation) {
  const topo::Topology t = h100_2x8();
  std::mt19937_64 rng(52);
  for (int trial = 0; trial < 6; ++trial) {
    const ir::Workload w = documents(rng, 16, 512, 32768, 131072);
    SCOPED_TRACE(fmt::format("trial {}: {}", trial, w.mask_text()));
    const sched::PlanRequest req{"ring", w, 16, 2};
    ChunkSolveOptions o;
    o.budget_ms = 1e9;                                      // every shuffle, whatever the machine
    std::vector<std::pair<std::size_t, std::size_t>> told;  // the progress line's: one call per candidate
    o.progress = [&](std::size_t tried, std::size_t most) { told.emplace_back(tried, most); };
    auto s = solve_chunk_map(req, t, o);
    ASSERT_TRUE(s.ok()) << s.error().message();
    ASSERT_EQ(told.size(), std::size_t(s->candidates));
    for (std::size_t i = 0; i < told.size(); ++i) {
      EXPECT_EQ(told[i].first, i + 1);
      EXPECT_EQ(told[i].second, told.size());  // every shuffle ran: the most there could be
    }
    o.progress = nullptr;
    ASSERT_TRUE(s->thd.has_value());
    EXPECT_LE(s->best.makespan_s, s->thd->makespan_s);
    EXPECT_LE(s->best.makespan_s, s->contiguous.makespan_s);
    EXPECT_EQ(s->candidates, int(s->tried.size()));
    ir::Workload solved = w;
    solved.chunk_map = s->chunk_map;
    ASSERT_TRUE(solved.check(16).ok()) << solved.check(16).error().message();
    // The answer is the simulation of the map it returns.
    auto e = evaluate({"ring", solved, 16, 2}, t, false);
    ASSERT_TRUE(e.ok()) << e.error().message();
    EXPECT_DOUBLE_EQ(e->result.makespan_s, s->best.makespan_s);
    // One seed, one answer.
    auto again = solve_chunk_map(req, t, o);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->chunk_map, s->chunk_map);
    EXPECT_EQ(again->candidate, s->candidate);
  }
}

TEST(ChunkSolver, ItsJobsChangeHowLongItTakesNotWhatItChooses) {
  const topo::Topology t = h100_2x8();
  std::mt19937_64 rng(7);
  ir::Workload w = documents(rng, 16, 512, 32768, 131072);
  w.pass = ir::PassKind::Fwd;  // TASP's only pass
  SCOPED_TRACE(w.mask_text());
  ChunkSolveOptions o;
  o.budget_ms = 1e9;  // every shuffle, whatever the machine
  o.shuffles = 5;     // batches of 3: 3, then 2
  const auto alone = solve_chunk_map({"tasp", w, 16, 2}, t, o);
  ASSERT_TRUE(alone.ok()) << alone.error().message();
  o.jobs = 3;
  std::vector<std::size_t> told;
  o.progress = [&](std::size_t tried, std::size_t most) {
    EXPECT_EQ(most, std::size_t(alone->candidates));
    told.push_back(tried);
  };
  const auto three = solve_chunk_map({"tasp", w, 16, 2}, t, o);
  ASSERT_TRUE(three.ok()) << three.error().message();
  EXPECT_EQ(three->tried, alone->tried);  // every candidate's simulated time, in order, bit for bit
  EXPECT_EQ(three->candidate, alone->candidate);
  EXPECT_EQ(three->chunk_map, alone->chunk_map);
  EXPECT_EQ(three->best.sent_bytes, alone->best.sent_bytes);
  EXPECT_EQ(three->contiguous.makespan_s, alone->contiguous.makespan_s);
  ASSERT_FALSE(told.empty());
  EXPECT_TRUE(std::is_sorted(told.begin(), told.end()));
  EXPECT_LE(told.back(), std::size_t(alone->candidates));
}

TEST(ChunkSolver, RefusesWhatItCannotPlace) {
  const topo::Topology t = h100_2x8();
  ir::Workload w;
  w.seq = 4096;
  w.causal = true;
  w.layout = ir::Layout::Balanced;
  auto s = solve_chunk_map({"ring", w, 16, 2}, t);  // no documents
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().field, Field::Layout);
  w.documents = {4096};
  ir::Workload unsolved = w;
  EXPECT_FALSE(unsolved.check(16).ok());  // the balanced layout without a chunk map
}

}  // namespace
}  // namespace charm::sim
