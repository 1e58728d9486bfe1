// The pipeline stage by stage at one cluster size (bench/RESULTS.md, "Scaling by stage"):
// topology (the generated H100-like cluster, N/8 nodes of 8, or --uniform), plan, validate,
// simulate, each timed once (wall) with the process's resident-set high-water mark over that
// stage alone (VmHWM reset before each stage where the kernel allows it).
//
//   scale_stages N [ALGO] [PASS] [SEQ] [--uniform] [--symmetry] [--causal] [--zigzag]
//                [--stages topology,plan,validate,simulate,window]
//
// The window stage (after simulate) measures what a simulator that consumed the plan while the planner
// generates it would hold: at each simulated moment, the ops generated and not yet complete, where the
// generators run as far as the last op they have issued. Four cases: one generator in today's emission
// order (ids), one per node of 8 ranks, one per rank, one per lane (rank, stream), each in id order over its
// ops; and the id span from the oldest op not complete to the furthest issued (what a ring buffer of ops
// would hold).
//
// One line of JSON per run, for scripts/scale-table.sh to tabulate.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>

#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"
#include "sim/evaluate.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology_json.hpp"

namespace {

using namespace charm;
using Clock = std::chrono::steady_clock;

/// A field of /proc/self/status in bytes (VmRSS, VmHWM); 0 where there is none.
double status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::atof(line.c_str() + field.size() + 1) * 1024.0;
  return 0;
}

/// Resets the high-water mark to the current resident set (Linux: clear_refs 5); false if not allowed.
bool reset_hwm() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return bool(out.flush());
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "scale_stages: %s\n", what.c_str());
  std::exit(2);
}

struct Stage {
  double rss0 = 0;
  bool reset = false;
  Clock::time_point t0;
  Stage() : rss0(status_bytes("VmRSS")), reset(reset_hwm()), t0(Clock::now()) {}
  nlohmann::json done() const {
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    const double hwm = status_bytes("VmHWM");
    return {{"s", s}, {"peak_rss_bytes", hwm}, {"stage_bytes", hwm - rss0}, {"hwm_reset", reset}};
  }
};

/// The streamed-simulation window of a simulated plan (see the header) when the planner's ops come from
/// generators of `group` ranks each (ranks [g * group, (g + 1) * group) in id order, each generator as far
/// as its last issued op), or with `group` 0 one generator per lane (rank, stream): the peak count of
/// generated ops not complete, and the peak id span from the oldest op not complete to the furthest issued
/// (one generator: the plan's own emission order).
nlohmann::json emission_window(const ir::Plan& plan, const sim::SimResult& r, int group) {
  const std::size_t n = r.start_s.size();
  const std::size_t gens =
      group == 0 ? std::size_t(plan.ranks) * ir::kNumStreams : std::size_t((plan.ranks + group - 1) / group);
  auto generator = [&](ir::OpId id) {
    const ir::Op& o = plan.op(id);
    return group == 0 ? std::size_t(o.rank) * ir::kNumStreams + std::size_t(o.stream) : std::size_t(o.rank / group);
  };
  std::vector<std::uint32_t> pos(n);  // an op's place in its generator's sequence
  {
    std::vector<std::uint32_t> count(gens, 0);
    for (std::size_t i = 0; i < n; ++i) pos[i] = count[generator(ir::OpId(i))]++;
  }
  struct Ev {
    double t;
    std::uint32_t issue;  // 0: the op completes (first at equal times), 1: it is issued
    std::uint32_t id;
  };
  std::vector<Ev> ev;
  ev.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    ev.push_back({r.start_s[i], 1, std::uint32_t(i)});
    ev.push_back({r.end_s[i], 0, std::uint32_t(i)});
  }
  std::sort(ev.begin(), ev.end(), [](const Ev& a, const Ev& b) {
    return a.t < b.t || (a.t == b.t && (a.issue < b.issue || (a.issue == b.issue && a.id < b.id)));
  });
  std::vector<std::uint32_t> generated(gens, 0);  // per generator: ops generated so far
  std::vector<char> done(n, 0);
  std::size_t total = 0, completed = 0, live = 0, frontier = 0, oldest = 0, span = 0;
  for (const Ev& e : ev) {
    if (e.issue == 1) {
      auto& g = generated[generator(ir::OpId(e.id))];
      if (pos[e.id] + 1 > g) {
        total += pos[e.id] + 1 - g;
        g = pos[e.id] + 1;
      }
      frontier = std::max(frontier, std::size_t(e.id) + 1);
    } else {
      done[e.id] = 1;
      ++completed;
      while (oldest < n && done[oldest]) ++oldest;
    }
    live = std::max(live, total - std::min(total, completed));
    span = std::max(span, frontier - std::min(frontier, oldest));
  }
  return {{"ranks_per_generator", group == 0 ? nlohmann::json("lane") : nlohmann::json(group)},
          {"peak_live_ops", live},
          {"peak_span_ops", span},
          {"peak_live_share", double(live) / double(std::max<std::size_t>(n, 1))}};
}

}  // namespace

/// The command line: N [ALGO] [PASS] [SEQ] and the flags.
struct Args {
  int n = 0;
  std::string algo = "charm", pass = "both", stages = "topology,plan,validate,simulate";
  long long seq = 1LL << 20;
  bool uniform = false, by_symmetry = false, causal = false, zigzag = false;
};

Args parse_args(int argc, char** argv) {
  Args g;
  g.n = std::atoi(argv[1]);
  int pos = 0;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--uniform")
      g.uniform = true;
    else if (a == "--symmetry")
      g.by_symmetry = true;
    else if (a == "--causal")
      g.causal = true;
    else if (a == "--zigzag")
      g.zigzag = true;
    else if (a == "--stages" && i + 1 < argc)
      g.stages = argv[++i];
    else if (pos == 0) {
      g.algo = a;
      ++pos;
    } else if (pos == 1) {
      g.pass = a;
      ++pos;
    } else if (pos == 2) {
      g.seq = std::atoll(a.c_str());
      ++pos;
    } else
      die("unexpected argument " + a);
  }
  return g;
}

/// The h100 preset's numbers (NVLink 365.1 GB/s, 42.5 GB/s NIC per GPU), N/8 nodes; or --uniform.
topo::Topology make_topology(int n, bool uniform) {
  if (uniform) return topo::make_uniform(n, 50, 300);
  nlohmann::json j = {
      {"name", fmt::format("h100-{}x8", n / 8)},
      {"gpu",
       {{"model", "H100"},
        {"tflops", 989.0},
        {"hbm_gbps", 3350},
        {"efficiency", {{"fwd", 0.35}, {"bwd", 0.28}}},
        {"half_tokens", 128},
        {"launch_us", 10},
        {"memory_gb", 80}}},
      {"nodes", n / 8},
      {"gpus_per_node", 8},
      {"intra", {{"bandwidth_gbps", 365.1}, {"latency_us", 3}, {"sharing", "dedicated"}}},
      {"inter", {{"bandwidth_gbps", 42.5}, {"latency_us", 8}, {"sharing", "shared"}, {"nic", "per_gpu"}}}};
  auto r = topo::parse_topology(j, "generated");
  if (!r) die(r.error().message());
  return std::move(r).value();
}

int main(int argc, char** argv) {
  if (argc < 2)
    die("usage: scale_stages N [ALGO] [PASS] [SEQ] [--uniform] [--symmetry] [--causal] [--zigzag] [--stages LIST]");
  const Args g = parse_args(argc, argv);
  const int n = g.n;
  const std::string &algo = g.algo, &pass = g.pass, &stages = g.stages;
  const long long seq = g.seq;
  const bool uniform = g.uniform, by_symmetry = g.by_symmetry, causal = g.causal, zigzag = g.zigzag;
  const auto want = [&](const char* s) { return stages.find(s) != std::string::npos; };
  if (n < 8 || n % 8 != 0) die("N must be a multiple of 8");
  nlohmann::json out = {{"n", n},           {"algo", algo},       {"pass", pass},
                        {"seq", seq},       {"uniform", uniform}, {"symmetry", by_symmetry},
                        {"causal", causal}, {"zigzag", zigzag}};

  std::optional<topo::Topology> t;
  {
    Stage st;
    t = make_topology(n, uniform);
    out["topology"] = st.done();
  }
  if (!want("plan")) {
    std::cout << out.dump() << "\n";
    return 0;
  }
  sched::PlanRequest req;
  req.algo = algo;
  req.ranks = n;
  req.domains = algo == "charm" || algo == "usp" ? (uniform ? 1 : n / 8) : 1;
  req.workload.seq = seq;
  req.workload.heads = req.workload.kv_heads = 12;
  req.workload.head_dim = 192;
  req.workload.pass = pass == "fwd" ? ir::PassKind::Fwd : pass == "bwd" ? ir::PassKind::Bwd : ir::PassKind::Both;
  req.workload.causal = causal;
  req.workload.layout = zigzag ? ir::Layout::Zigzag : ir::Layout::Contiguous;
  std::optional<ir::Plan> plan;
  {
    Stage st;
    const auto nreq = sched::normalised(req);
    ir::RankSymmetry q;
    if (by_symmetry) {
      q = sim::simulation_symmetry(nreq, *t);
      if (!q.active()) die("the plan and the topology share no rank symmetry");
      out["classes"] = q.elements(n);
    }
    auto p = sched::make_plan(nreq, q);
    if (!p) die(p.error().message());
    plan = std::move(p).value();
    out["plan"] = st.done();
    out["ops"] = plan->size();
    out["deps"] = plan->num_deps();
    out["buffers"] = plan->buffers().size();
    out["plan_bytes"] = plan->memory_bytes();
  }
  if (want("validate") && !by_symmetry) {
    Stage st;
    const auto rep = sched::validate(*plan);
    out["validate"] = st.done();
    out["valid"] = rep.ok();
  }
  if (want("simulate")) {
    Stage st;
    const auto model = sim::compute_model_for(*t, plan->workload);
    auto r = sim::simulate(*plan, *t, model);
    if (!r) die(r.error().message());
    out["simulate"] = st.done();
    out["time_ms"] = r->makespan_s * 1e3;
    out["events"] = r->events;
    if (want("window"))
      for (int group : {n, 8, 1, 0}) out["window"].push_back(emission_window(*plan, *r, group));
  }
  std::cout << out.dump() << "\n";
  return out.value("valid", true) ? 0 : 1;
}
