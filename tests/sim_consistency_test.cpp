// The simulator's numbers agree with themselves: on every preset, for every
// algorithm, pass and mask, the reported time is the end of the last op, the
// critical path ends at that op and starts at time 0, and every op ends no
// later than the makespan. A stale network event (a flow whose rate changed
// after its drain event was queued) must never move the clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <optional>
#include <tuple>

#include "scheduler/planners/plan_builder.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/trace/summary.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {
namespace {

using namespace charm::ir;

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CHARM_SOURCE_DIR) + "/topologies"))
    if (e.path().extension() == ".json") v.push_back(e.path().stem().string());
  std::sort(v.begin(), v.end());
  return v;
}

// (preset, pass, causal)
using Param = std::tuple<std::string, Phase, bool>;
class ClockConsistency : public ::testing::TestWithParam<Param> {};

TEST_P(ClockConsistency, TimeIsTheEndOfTheLastOpOnEveryAlgorithm) {
  const auto& [preset, phase, causal] = GetParam();
  auto t = topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/" + preset + ".json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  Workload w;
  w.batch = 2;
  w.seq = std::int64_t(t->num_gpus()) * 512;
  w.heads = 8;
  w.kv_heads = 8;
  w.head_dim = 64;
  w.dtype = DType::BF16;
  w.causal = causal;
  w.layout = causal ? Layout::Zigzag : Layout::Contiguous;
  w.pass = phase == Phase::Fwd ? PassKind::Fwd : PassKind::Bwd;
  int simulated = 0;
  for (const auto& algo : sched::algorithm_names()) {
    sched::PlanRequest req{algo, w, t->num_gpus(), default_domains(*t)};
    req = sched::normalised(req);
    if (!sched::check_request(req).ok()) continue;
    auto ev = evaluate(req, *t);
    ASSERT_TRUE(ev.ok()) << algo << ": " << ev.error().message();
    const auto& r = ev->result;
    ++simulated;
    const double last_end = *std::max_element(r.end_s.begin(), r.end_s.end());
    EXPECT_EQ(r.makespan_s, last_end) << algo;
    ASSERT_FALSE(r.critical_path.empty()) << algo;
    EXPECT_EQ(r.end_s[std::size_t(r.critical_path.back())], r.makespan_s) << algo;
    EXPECT_EQ(r.start_s[std::size_t(r.critical_path.front())], 0.0) << algo;
    EXPECT_EQ(ev->summary.time_s, r.makespan_s) << algo;
    // A measured run's summary (trace::summarize, every `charm run` backend) read off the
    // simulator's own op times is the simulator's summary: one meaning for both.
    if (ev->plan.symmetry.active()) continue;
    trace::Timeline tl = trace::Timeline::zeros(ev->plan);
    tl.start_s = r.start_s;
    tl.end_s = r.end_s;
    const trace::RunSummary m = trace::summarize(ev->plan, tl);
    const Summary& s = ev->summary;
    auto near = [](double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(1e-12, std::abs(b)); };
    EXPECT_TRUE(near(m.time_s, s.time_s)) << algo;
    EXPECT_TRUE(near(m.exposed_comm_s, s.exposed_comm_s)) << algo << " " << m.exposed_comm_s << " " << s.exposed_comm_s;
    EXPECT_TRUE(near(m.exposed_comm_mean_s, s.exposed_comm_mean_s)) << algo;
    EXPECT_TRUE(near(m.idle_mean_s, s.idle_mean_s)) << algo << " " << m.idle_mean_s << " " << s.idle_mean_s;
    EXPECT_TRUE(near(m.compute_busy_mean_s, s.busy_mean_s)) << algo;
    EXPECT_TRUE(near(m.comm_busy_mean_s, s.comm_busy_mean_s))
        << algo << " " << m.comm_busy_mean_s << " " << s.comm_busy_mean_s;
  }
  EXPECT_GE(simulated, 4) << "too few algorithms can run on " << preset;
}

std::string name(const ::testing::TestParamInfo<Param>& i) {
  std::string p = std::get<0>(i.param);
  for (auto& c : p)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return p + (std::get<1>(i.param) == Phase::Fwd ? "_fwd" : "_bwd") + (std::get<2>(i.param) ? "_causal" : "_full");
}

INSTANTIATE_TEST_SUITE_P(Presets, ClockConsistency,
                         ::testing::Combine(::testing::ValuesIn(preset_names()),
                                            ::testing::Values(Phase::Fwd, Phase::Bwd), ::testing::Bool()),
                         name);

// The case that exposed the stale event: rm+ forward on the dual-NUMA L20 (as
// the preset stood then: Table 2 links, one shared 14.7 GB/s bridge) at the
// paper's workload. With today's rm+ schedule its trace and critical path end
// at 627.496 ms; letting a stale drain event that pops after the last real one
// move the clock (the bug) ends it at 799.333 ms.
TEST(ClockConsistency, StaleDrainEventDoesNotMoveTheClock) {
  auto t = topo::parse_topology_text(
      R"({"name": "l20-8-2numa", "stack": "none", "gpu": {"model": "NVIDIA L20", "sm_count": 0, "tflops": {"bf16": 119.5,
      "fp16": 119.5, "fp32": 59.8}, "hbm_gbps": 864, "efficiency": {"fwd": 0.5, "bwd": 0.4}, "half_tokens": 128,
      "launch_us": 10}, "nodes": 1, "gpus_per_node": 8, "numa_per_node": 2,
      "intra": {"bandwidth_gbps": 24.0, "latency_us": 5, "sharing": "shared"},
      "numa": {"bandwidth_gbps": 14.7, "latency_us": 8, "sharing": "shared"}, "domain": "numa"})",
      "l20");
  ASSERT_TRUE(t.ok()) << t.error().message();
  Workload w;
  w.batch = 16;
  w.seq = 26880;
  w.heads = 12;
  w.kv_heads = 12;
  w.head_dim = 192;
  w.dtype = DType::BF16;
  w.pass = PassKind::Fwd;
  auto ev = evaluate({"rm+", w, 8, default_domains(*t)}, *t);
  ASSERT_TRUE(ev.ok()) << ev.error().message();
  const auto& r = ev->result;
  const double last_end = *std::max_element(r.end_s.begin(), r.end_s.end());
  EXPECT_EQ(r.makespan_s, last_end);
  EXPECT_NEAR(r.makespan_s, 0.627496, 1e-6);  // not 799.333 ms
}

}  // namespace
}  // namespace charm::sim

namespace charm::sim {
namespace {

// Peak memory is a property of the schedule (bounded in-flight buffers), not of
// timing: on h100-2x8 (16 GPUs, 2 domains; 16 heads x 128, bf16, no mask), every
// algorithm's peak per rank doubles exactly from 128k to 256k tokens and from
// batch 1 to 2. The figure is in bytes per b*s*h (s = tokens per GPU, h = heads *
// head_dim; bf16 [b, s, h] tensors are half of it), pinned so that a change is
// noticed; docs/validation.md tabulates it. Before its buffers were bounded, ring
// backward (8 heads) held 106, 90 or 50 b*s*h depending on which stream lagged.
struct PeakCase {
  std::string algo;
  PassKind pass;
  double per_bsh;
  bool causal = false;  // causal mask, contiguous layout
};
void PrintTo(const PeakCase& c, std::ostream* os) {
  *os << c.algo << ' ' << to_string(c.pass) << (c.causal ? " causal " : " ") << c.per_bsh;
}

class PeakMemory : public ::testing::TestWithParam<PeakCase> {};

TEST_P(PeakMemory, IsFixedPerBshAtEveryBatchAndSequence) {
  const PeakCase& c = GetParam();
  static const auto t = topo::load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json");
  ASSERT_TRUE(t.ok()) << t.error().message();
  constexpr int kRanks = 16;
  auto peak_bytes = [&](std::int64_t batch, std::int64_t seq) {
    Workload w;
    w.batch = batch;
    w.seq = seq;
    w.heads = 16;  // ulysses splits kv heads over 16 ranks, usp over 8
    w.kv_heads = 16;
    w.head_dim = 128;
    w.dtype = DType::BF16;
    w.pass = c.pass;
    w.causal = c.causal;
    auto ev = evaluate(sched::normalised({c.algo, w, kRanks, 2}), *t);
    EXPECT_TRUE(ev.ok()) << ev.error().message();
    if (!ev.ok()) return 0.0;
    ir::Bytes peak = 0;
    for (const auto& r : ev->result.ranks) peak = std::max(peak, r.peak_mem_bytes);
    return double(peak);
  };
  auto bsh = [](std::int64_t batch, std::int64_t seq) { return double(batch) * double(seq / kRanks) * 16.0 * 128.0; };
  const double base = peak_bytes(1, 131072), longer = peak_bytes(1, 262144), wider = peak_bytes(2, 131072);
  EXPECT_NEAR(base / bsh(1, 131072), c.per_bsh, 0.1);
  EXPECT_NEAR(longer / bsh(1, 262144), c.per_bsh, 0.1);
  EXPECT_NEAR(wider / bsh(2, 131072), c.per_bsh, 0.1);
  for (double grown : {longer / base, wider / base}) {
    EXPECT_GE(grown, 1.9);
    EXPECT_LE(grown, 2.1);
  }
}

std::string peak_name(const ::testing::TestParamInfo<PeakCase>& i) {
  std::string a;
  for (char ch : i.param.algo) a += std::isalnum(static_cast<unsigned char>(ch)) ? ch : (ch == '+' ? 'p' : '_');
  return a + (i.param.pass == PassKind::Fwd ? "_fwd" : "_bwd") + (i.param.causal ? "_causal" : "");
}

// Every algorithm and pass it has (tasp defines no backward).
const std::vector<PeakCase> kPeakCases{
    {"ring", PassKind::Fwd, 16.03},
    {"ring", PassKind::Bwd, 42.09},
    {"ring-zigzag", PassKind::Fwd, 16.03},
    {"ring-zigzag", PassKind::Bwd, 42.09},
    {"merge", PassKind::Fwd, 44.03},
    {"merge", PassKind::Bwd, 154.09},
    {"rm+", PassKind::Fwd, 22.09},
    {"rm+", PassKind::Bwd, 50.16},
    {"charm", PassKind::Fwd, 22.13},
    {"charm", PassKind::Bwd, 54.22},
    // Under a causal mask some exchanges carry nothing, so ranks reach their slots at
    // different times; the slots still fix the peak (charm backward used to depend on timing).
    {"charm", PassKind::Fwd, 22.13, true},
    {"charm", PassKind::Bwd, 54.22, true},
    {"allgather-kv", PassKind::Fwd, 68.03},
    {"allgather-kv", PassKind::Bwd, 102.09},
    {"tasp", PassKind::Fwd, 16.03},
    {"tasp-zigzag", PassKind::Fwd, 16.03},
    {"ulysses", PassKind::Fwd, 13.75},
    {"ulysses", PassKind::Bwd, 29.53},
    {"usp", PassKind::Fwd, 15.50},
    {"usp", PassKind::Bwd, 34.09},
};

INSTANTIATE_TEST_SUITE_P(H100x16, PeakMemory, ::testing::ValuesIn(kPeakCases), peak_name);

TEST(PeakMemoryCases, CoverEveryAlgorithm) {
  for (const auto& algo : sched::algorithm_names())
    EXPECT_TRUE(std::any_of(kPeakCases.begin(), kPeakCases.end(), [&](const PeakCase& c) { return c.algo == algo; }))
        << algo << " has no pinned peak memory";
}

// Progress reports, planning and simulating, are counts that only grow, every kProgressOps ops, the last the
// plan's size; asking for them changes no figure.
TEST(Progress, PlannerAndSimulatorReportGrowingCountsAndChangeNothing) {
  const auto t = std::make_optional(topo::make_uniform(128, 50, 300, 5, 2000));
  Workload w;
  w.seq = 128 * 1024;
  w.heads = 8;
  w.kv_heads = 8;
  w.head_dim = 64;
  w.causal = true;
  w.pass = PassKind::Both;
  const sched::PlanRequest req = sched::normalised({"ring", w, 128, 1});
  std::vector<std::size_t> planned;
  auto plan = sched::make_plan(req, {}, nullptr, [&](std::size_t ops, double) { planned.push_back(ops); });
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const std::size_t n = plan->size();
  ASSERT_GT(n, sched::PlanBuilder::kProgressOps) << "the case must be large enough to report";
  ASSERT_EQ(planned.size(), n / sched::PlanBuilder::kProgressOps);
  for (std::size_t k = 0; k < planned.size(); ++k) EXPECT_EQ(planned[k], (k + 1) * sched::PlanBuilder::kProgressOps);

  std::vector<std::pair<std::size_t, std::size_t>> simulated;
  SimOptions with;
  with.progress = [&](std::size_t done, std::size_t total) { simulated.emplace_back(done, total); };
  auto a = evaluate_plan(*plan, *t, with);
  auto b = evaluate_plan(*plan, *t);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_GE(simulated.size(), n / SimOptions::kProgressOps);
  for (std::size_t k = 0; k < simulated.size(); ++k) {
    EXPECT_EQ(simulated[k].second, n);
    if (k == 0) continue;
    const std::size_t step = k + 1 < simulated.size() ? SimOptions::kProgressOps : 0;  // the last: the end
    EXPECT_GE(simulated[k].first, simulated[k - 1].first + step);
  }
  EXPECT_EQ(simulated.back().first, n);
  EXPECT_EQ(a->result.makespan_s, b->result.makespan_s);
  EXPECT_EQ(a->result.events, b->result.events);
  EXPECT_EQ(a->result.end_s, b->result.end_s);
  EXPECT_EQ(a->summary.peak_mem_bytes, b->summary.peak_mem_bytes);
}

}  // namespace
}  // namespace charm::sim
