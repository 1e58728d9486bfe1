// The sweep engine on its own: configuration numbering, ring = 1, determinism
// across worker counts, cancellation, forced layouts, swept fields, and the gnuplot script.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/sweep.hpp"
#include "sim/sweep_plot.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {
namespace {

SweepControl jobs(int n, const std::atomic<bool>* cancel = nullptr) {
  SweepControl c;
  c.jobs = n;
  c.cancel = cancel;
  return c;
}

SweepSpec small_spec() {
  SweepSpec s;
  s.topologies = {topo::make_uniform(4, 50, 100, 1), topo::make_uniform(8, 25, 200, 2)};
  s.topologies[0].name = "u4";
  s.topologies[1].name = "u8";
  s.batch = {1, 2};
  s.seq = {8192, 32768};
  s.heads = {8};
  s.head_dim = {64, 128};
  s.causal = {false, true};
  s.algos = {"ring", "merge", "rm+", "charm"};
  s.passes = {ir::Phase::Fwd, ir::Phase::Bwd};
  return s;
}

TEST(SweepEngine, ConfigurationsAreNumberedTopologySlowestLayoutFastest) {
  const auto s = small_spec();
  ASSERT_EQ(s.num_configs(), 2u * 2 * 2 * 1 * 2 * 2);
  const auto first = sweep_config(s, 0), second = sweep_config(s, 1), last = sweep_config(s, s.num_configs() - 1);
  EXPECT_EQ(first.topology, 0u);
  EXPECT_FALSE(first.workload.causal);
  EXPECT_TRUE(second.workload.causal);  // causal varies fastest here (one layout)
  EXPECT_EQ(second.workload.head_dim, 64);
  EXPECT_EQ(last.topology, 1u);
  EXPECT_EQ(last.workload.batch, 2);
  EXPECT_EQ(last.workload.seq, 32768);
  EXPECT_EQ(last.workload.head_dim, 128);
  EXPECT_EQ(last.workload.kv_heads, 8);  // no kv list: kv_heads = heads
}

TEST(SweepEngine, OneRowPerConfigAlgoPassAndRingIsOne) {
  const auto s = small_spec();
  const auto res = run_sweep(s, jobs(2));
  EXPECT_FALSE(res.cancelled);
  EXPECT_EQ(res.skipped, 0u);
  EXPECT_TRUE(res.failures.empty());
  ASSERT_EQ(res.rows.size(), s.num_configs() * 4 * 2);
  for (const auto& r : res.rows) {
    if (r.algo == "ring") {
      EXPECT_EQ(r.speedup_vs_ring, 1.0);
    }
    EXPECT_GT(r.time_ms, 0);
    EXPECT_GT(r.ccr, 0);
  }
  // Row order: configuration, pass, algorithm.
  EXPECT_EQ(res.rows[0].algo, "ring");
  EXPECT_EQ(res.rows[0].pass, ir::Phase::Fwd);
  EXPECT_EQ(res.rows[4].pass, ir::Phase::Bwd);
}

TEST(SweepEngine, SameRowsWhateverTheJobs) {
  const auto s = small_spec();
  const auto one = sweep_csv(s, run_sweep(s, jobs(1)));
  EXPECT_EQ(one, sweep_csv(s, run_sweep(s, jobs(3))));
  EXPECT_EQ(one, sweep_csv(s, run_sweep(s, jobs(64))));
}

TEST(SweepEngine, TasksReadBackFromTheirBytesGiveTheSameRows) {
  // What a sweep over MPI does: every task's output to bytes and back, then assembled in task order.
  auto s = small_spec();
  s.layouts = {ir::Layout::Contiguous, ir::Layout::Zigzag};
  const auto csv = sweep_csv(s, run_sweep(s, jobs(2)));
  std::vector<std::optional<SweepTaskOut>> outs(sweep_tasks(s));
  for (std::size_t i = 0; i < outs.size(); ++i) {
    auto back = decode_task(s, encode_task(run_sweep_task(s, i)));
    ASSERT_TRUE(back) << back.error().message();
    outs[i] = std::move(*back);
  }
  EXPECT_EQ(sweep_csv(s, sweep_result(s, std::move(outs), 0)), csv);
  // Bytes that are not a task's output are an error, not a row.
  EXPECT_FALSE(decode_task(s, "not msgpack"));
  SweepTaskOut far;
  far.rows.emplace_back().topology = 7;  // the spec has two topologies
  EXPECT_FALSE(decode_task(s, encode_task(far)));
}

TEST(SweepEngine, PlansReusedAcrossBatchesGiveTheSameRows) {
  // Batches 1, 2, 4, 8, 16 share a plan; 3, 6 and 12 another; 5 stands alone.
  auto s = small_spec();
  s.topologies.push_back(topo::make_uniform(16, 25, 200, 2));
  s.topologies.back().name = "u16";
  s.batch = {1, 3, 2, 5, 4, 6, 8, 12, 16};
  s.seq = {8192};
  s.head_dim = {64};
  s.layouts = {ir::Layout::Contiguous, ir::Layout::Zigzag};
  s.algos = sched::algorithm_names();
  SweepControl fresh = jobs(2);
  fresh.reuse_plans = false;
  const auto a = run_sweep(s, jobs(2)), b = run_sweep(s, fresh);
  EXPECT_EQ(a.failures, b.failures);
  EXPECT_EQ(a.skip_reasons, b.skip_reasons);
  EXPECT_GT(a.rows.size(), 1000u);
  EXPECT_EQ(sweep_csv(s, a), sweep_csv(s, b));
  // The order of work is a permutation of the tasks, the batches of a configuration in a row.
  std::set<std::size_t> seen;
  for (std::size_t k = 0; k < sweep_tasks(s); ++k) seen.insert(sweep_task_to_run(s, k));
  EXPECT_EQ(seen.size(), sweep_tasks(s));
  EXPECT_EQ(*seen.rbegin(), sweep_tasks(s) - 1);
  const std::size_t passes = s.passes.size();
  EXPECT_EQ(sweep_config(s, sweep_task_to_run(s, 1) / passes).workload.batch, 3);
}

TEST(SweepEngine, PlanReuseScalesTheLastPlanOfItsAlgorithmAndPass) {
  const auto t = topo::make_uniform(8, 25, 200, 2);
  PlanReuse reuse;
  sched::PlanRequest req{"charm", {}, 8, 2};
  req.workload.seq = 8192;
  for (std::int64_t b : {1, 4, 2, 3, 6, 5}) {
    req.workload.batch = b;
    const auto got = reuse.evaluate(req, t, {});
    const auto want = evaluate(req, t, /*by_symmetry=*/true);
    ASSERT_TRUE(got && want);
    EXPECT_EQ(got->time_s, want->summary.time_s) << "batch " << b;
    EXPECT_EQ(got->peak_mem_bytes, want->summary.peak_mem_bytes) << "batch " << b;
  }
  EXPECT_EQ(reuse.built(), 3u);   // 1, 3, 5
  EXPECT_EQ(reuse.reused(), 3u);  // 4 and 2 from 1, 6 from 3
}

TEST(SweepEngine, ConfigurationsThatAreOneSimulationShareItsFiguresBitForBit) {
  // The calibrated presets price blocks by shape and charge result updates at the HBM rate: the model's
  // every use of the batch and the heads. Batches 1-12 against heads 4-24 make pairs a power of two apart
  // (2 x 8 and 1 x 16) and pairs that are not (3 x 8 and 1 x 24), GQA fixed and not.
  auto h100 = topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json");
  auto h20 = topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h20-8.json");
  ASSERT_TRUE(h100 && h20);
  SweepSpec s;
  s.topologies = {*h100, *h20};
  s.batch = {1, 2, 3, 4, 6, 8, 12};
  s.seq = {16384};
  s.heads = {4, 8, 12, 16, 24};
  s.head_dim = {64};
  s.causal = {false, true};
  s.layouts = {ir::Layout::Contiguous, ir::Layout::Zigzag};
  s.algos = sched::algorithm_names();
  s.passes = {ir::Phase::Fwd, ir::Phase::Bwd};
  // Kv heads = heads; GQA groups of 1-6 (2 x 8 / 4 is 1 x 16 / 8); one kv head count for all (nothing shares).
  for (const auto& kv : std::vector<std::vector<std::int64_t>>{{}, {4, 8}, {4}}) {
    s.kv_heads = kv;
    SweepControl apart = jobs(2);
    apart.share_simulations = false;
    const auto shared = run_sweep(s, jobs(2)), alone = run_sweep(s, apart);
    EXPECT_EQ(shared.failures, alone.failures);
    EXPECT_EQ(shared.skip_reasons, alone.skip_reasons);
    EXPECT_EQ(sweep_csv(s, shared), sweep_csv(s, alone));
    EXPECT_EQ(shared.simulations + shared.shared, alone.simulations);
    EXPECT_EQ(alone.shared, 0u);
    if (kv.size() == 1)
      EXPECT_EQ(shared.shared, 0u);
    else
      EXPECT_GT(shared.shared, alone.simulations / 10);
  }
}

TEST(SweepEngine, OnlyASplitOfOneBatchTimesHeadsAPowerOfTwoApartIsOneSimulation) {
  auto key = [](const std::string& algo, std::int64_t b, std::int64_t h, std::int64_t kv) {
    sched::PlanRequest r{algo, {}, 16, 2};
    r.workload.batch = b;
    r.workload.heads = h;
    r.workload.kv_heads = kv;
    return SimulationMemo::key(r, 0);
  };
  EXPECT_EQ(key("charm", 2, 8, 8), key("charm", 1, 16, 16));
  EXPECT_EQ(key("ring", 8, 8, 2), key("ring", 1, 64, 16));
  EXPECT_NE(key("charm", 3, 8, 8), key("charm", 1, 24, 24));  // 3 is not a power of two
  EXPECT_NE(key("charm", 2, 8, 4), key("charm", 1, 16, 16));  // another GQA group
  EXPECT_NE(key("charm", 2, 8, 8), key("ring", 1, 16, 16));
  EXPECT_FALSE(key("ulysses", 2, 16, 16));  // it splits heads over ranks: planned by its heads
  EXPECT_FALSE(key("usp", 2, 16, 16));
}

TEST(SweepEngine, RingIsTheBaselineEvenWhenNotListed) {
  auto s = small_spec();
  s.algos = {"charm"};
  const auto res = run_sweep(s, jobs(2));
  ASSERT_EQ(res.rows.size(), s.num_configs() * 2);
  for (const auto& r : res.rows) EXPECT_GT(r.speedup_vs_ring, 0);
}

TEST(SweepEngine, CancelStopsBeforeAnyWork) {
  const auto s = small_spec();
  std::atomic<bool> cancel{true};
  const auto res = run_sweep(s, jobs(2, &cancel));
  EXPECT_TRUE(res.cancelled);
  EXPECT_TRUE(res.rows.empty());
}

TEST(SweepEngine, PlotScriptCarriesItsDataAndBothPanels) {
  const auto s = small_spec();
  const auto res = run_sweep(s, jobs(2));
  const auto gp = sweep_gnuplot_script(s, res, "out's.png", PlotFormat::Png);
  EXPECT_NE(gp.find("set output 'out''s.png'"), std::string::npos);  // quotes doubled
  EXPECT_NE(gp.find("$ccr_p1_a3_t1 << EOD"), std::string::npos);
  EXPECT_NE(gp.find("Backward: speedup vs CCR"), std::string::npos);
  EXPECT_NE(gp.find("Forward: speedup vs sequence length"), std::string::npos);
  EXPECT_NE(gp.find("u4 (4 GPUs"), std::string::npos);
  EXPECT_NE(sweep_gnuplot_script(s, res, "x.svg", PlotFormat::Svg).find("set terminal svg"), std::string::npos);
}

/// Everything that tells two rows apart in the CSV, the speedup excluded.
using RowKey = std::tuple<std::size_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, ir::DType,
                          bool, ir::Layout, std::string, ir::Phase>;
RowKey key_of(const SweepRow& r) {
  const auto& w = r.workload;
  return {r.topology, w.batch, w.seq, w.heads, w.kv_heads, w.head_dim, w.dtype, w.causal, w.layout, r.algo, r.pass};
}

SweepSpec layout_spec(std::vector<ir::Layout> layouts) {
  SweepSpec s;
  s.topologies = {topo::make_uniform(8, 25, 200, 2)};
  s.batch = {1};
  s.seq = {8192, 32768};
  s.heads = {8};
  s.head_dim = {128};
  s.causal = {true};
  s.layouts = std::move(layouts);
  s.algos = {"ring", "ring-zigzag", "charm", "tasp-zigzag"};
  return s;
}

// ring-zigzag and tasp-zigzag run on zigzag whatever the configuration says: with both layouts
// listed they would give two rows with one key and two speedups (over two different rings).
TEST(SweepEngine, ForcedLayoutAlgorithmsRunOncePerEffectiveLayout) {
  const auto s = layout_spec({ir::Layout::Contiguous, ir::Layout::Zigzag});
  const auto res = run_sweep(s, jobs(2));
  ASSERT_TRUE(res.failures.empty());
  EXPECT_EQ(res.skipped, 0u);
  std::map<RowKey, double> time;
  std::map<std::string, int> per_algo;
  for (const auto& r : res.rows) {
    EXPECT_TRUE(time.emplace(key_of(r), r.time_ms).second) << r.algo << " twice at seq " << r.workload.seq;
    ++per_algo[r.algo];
  }
  EXPECT_EQ(per_algo["ring"], 4);  // 2 seq x 2 layouts
  EXPECT_EQ(per_algo["charm"], 4);
  EXPECT_EQ(per_algo["ring-zigzag"], 2);  // 2 seq, zigzag only
  EXPECT_EQ(per_algo["tasp-zigzag"], 2);
  // Each speedup is over the ring row with the same key: ring-zigzag is ring on zigzag.
  for (const auto& r : res.rows) {
    if (r.algo != "ring-zigzag" && r.algo != "tasp-zigzag") continue;
    EXPECT_EQ(r.workload.layout, ir::Layout::Zigzag);
    auto ring = key_of(r);
    std::get<9>(ring) = "ring";
    ASSERT_TRUE(time.contains(ring));
    EXPECT_DOUBLE_EQ(r.speedup_vs_ring, time[ring] / r.time_ms) << r.algo;
  }
}

// Without zigzag in the list, the forced algorithms still get their one row per configuration,
// measured against ring on the listed layout (what ring-zigzag gains by balancing a causal mask).
TEST(SweepEngine, ForcedLayoutAlgorithmsRunWhenTheirLayoutIsNotListed) {
  const auto res = run_sweep(layout_spec({ir::Layout::Contiguous}), jobs(2));
  ASSERT_TRUE(res.failures.empty());
  std::map<std::string, int> per_algo;
  for (const auto& r : res.rows) {
    ++per_algo[r.algo];
    if (r.algo == "ring-zigzag") {
      EXPECT_EQ(r.workload.layout, ir::Layout::Zigzag);
      EXPECT_GT(r.speedup_vs_ring, 1.0);  // causal: contiguous ring waits on its most loaded rank
    }
  }
  EXPECT_EQ(per_algo["ring-zigzag"], 2);
  EXPECT_EQ(per_algo["tasp-zigzag"], 2);
}

SweepSpec bandwidth_spec() {
  SweepSpec s;
  // What `charm sweep --set` builds: one topology per value, all from one file.
  for (double bw : {25.0, 100.0}) {
    s.topologies.push_back(topo::make_uniform(8, bw, 400, 2));
    s.topologies.back().name = "u8";
    s.points.push_back({0, {bw}});
  }
  s.set_fields = {"bw_gbps"};
  s.batch = {1};
  s.seq = {16384, 65536};
  s.heads = {8};
  s.head_dim = {128};
  s.algos = {"ring", "charm", "tasp"};
  s.passes = {ir::Phase::Fwd, ir::Phase::Bwd};
  return s;
}

TEST(SweepEngine, SweptFieldsAreColumnsAndRingIsOneAtEachPoint) {
  const auto s = bandwidth_spec();
  const auto res = run_sweep(s, jobs(2));
  ASSERT_TRUE(res.failures.empty());
  const auto cols = sweep_columns(s);
  ASSERT_GE(cols.size(), 2u);
  EXPECT_EQ(cols[0], "topology");
  EXPECT_EQ(cols[1], "bw_gbps");
  const std::string csv = sweep_csv(s, res);
  EXPECT_EQ(csv.rfind("topology,bw_gbps,ranks,", 0), 0u) << csv.substr(0, 80);
  EXPECT_NE(csv.find("\nu8,25,8,"), std::string::npos);
  EXPECT_NE(csv.find("\nu8,100,8,"), std::string::npos);
  std::map<std::pair<std::size_t, std::int64_t>, double> ring_ms;
  for (const auto& r : res.rows)
    if (r.algo == "ring") {
      EXPECT_EQ(r.speedup_vs_ring, 1.0);
      if (r.pass == ir::Phase::Fwd) ring_ms[{r.topology, r.workload.seq}] = r.time_ms;
    }
  for (auto seq : s.seq)
    EXPECT_LT(ring_ms.at({1, seq}), ring_ms.at({0, seq})) << "4x the bandwidth, no faster at seq " << seq;
  const auto j = sweep_json(s, res);
  EXPECT_EQ(j["columns"][1], "bw_gbps");
  EXPECT_EQ(j["rows"][0]["bw_gbps"], 25.0);
  EXPECT_EQ(j["topologies"][1]["bw_gbps"], 100.0);
}

/// The part of the script that draws the panel titled `title` (up to the next title).
std::string panel(const std::string& gp, const std::string& title) {
  const auto a = gp.find("set title '" + title);
  if (a == std::string::npos) return {};
  return gp.substr(a, gp.find("set title", a + 1) - a);
}

TEST(SweepEngine, PlotHasRunTimeAndSweptFieldViewsAndLegendsOnlyWhatIsDrawn) {
  const auto s = bandwidth_spec();
  const auto gp = sweep_gnuplot_script(s, run_sweep(s, jobs(2)), "x.png", PlotFormat::Png);
  EXPECT_NE(gp.find("bw_gbps 25,100"), std::string::npos);  // the title names the swept values
  for (const char* title : {"Forward: speedup vs sequence length", "Forward: speedup vs bw_gbps",
                            "Forward: run time vs bw_gbps", "Backward: run time vs bw_gbps"})
    EXPECT_FALSE(panel(gp, title).empty()) << title;
  // tasp has no backward pass: the backward panels neither draw it nor list it.
  const std::string fwd = panel(gp, "Forward: speedup vs CCR"), bwd = panel(gp, "Backward: speedup vs CCR");
  EXPECT_NE(fwd.find("title 'tasp'"), std::string::npos) << fwd;
  EXPECT_EQ(bwd.find("title 'tasp'"), std::string::npos) << bwd;
  EXPECT_NE(bwd.find("title 'charm'"), std::string::npos) << bwd;
  EXPECT_EQ(panel(gp, "Backward: run time vs bw_gbps").find("'tasp'"), std::string::npos);
  // The run-time view draws ring too; the speedup views draw it as the line at 1.
  const std::string time = panel(gp, "Forward: run time vs bw_gbps");
  EXPECT_NE(time.find("title 'ring'"), std::string::npos) << time;
  EXPECT_EQ(time.find("ring (= 1)"), std::string::npos) << time;
  // One file: no topology entries in the legend, and the points of the file are one series.
  EXPECT_EQ(fwd.find("title 'u8"), std::string::npos) << fwd;
  EXPECT_EQ(gp.find("_t1 << EOD"), std::string::npos);
  // Log axes are labelled between the powers of ten: 25 and 100 with labels at the swept values.
  EXPECT_NE(panel(gp, "Forward: speedup vs bw_gbps").find("set xtics ('25' 25, '100' 100)"), std::string::npos);
}

TEST(SweepEngine, LogTicsLabelMoreThanPowersOfTen) {
  auto s = small_spec();
  const auto gp = sweep_gnuplot_script(s, run_sweep(s, jobs(2)), "x.png", PlotFormat::Png);
  const std::string ccr = panel(gp, "Forward: speedup vs CCR");
  const auto tics = ccr.find("set xtics (");
  ASSERT_NE(tics, std::string::npos) << ccr;
  const std::string list = ccr.substr(tics, ccr.find('\n', tics) - tics);
  EXPECT_GE(std::count(list.begin(), list.end(), ','), 3) << list;  // at least four labels
}

}  // namespace
}  // namespace charm::sim
