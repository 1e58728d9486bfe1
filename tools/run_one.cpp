#include "tools/run_one.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "scheduler/planners/layout.hpp"
#include "sim/simulator.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {

namespace {
/// A count as people read it in a progress line: 950, 12.3k, 3.9M.
std::string approx(double n) {
  if (n < 1e4) return fmt::format("{:.0f}", n);
  if (n < 1e6) return fmt::format("{:.1f}k", n / 1e3);
  return fmt::format("{:.1f}M", n / 1e6);
}

/// Full plans at least this large are simulated by their quotient under `--symmetry auto`: below,
/// every rank's ops are kept (traces and critical paths name every rank) and the run is quick anyway.
constexpr double kQuotientFromOps = 1 << 20;
}  // namespace

ir::RankSymmetry quotient_for(const sched::PlanRequest& req, const topo::Topology& t, SymmetryUse use) {
  if (use == SymmetryUse::Off) return {};
  const ir::RankSymmetry plan_sym = sim::plan_symmetry_on(req, t);
  const auto q =
      plan_sym.active()
          ? sim::topology_quotient(plan_sym, t, req.ranks)
          : Expected<ir::RankSymmetry>(Error{"", fmt::format("{} has no rank symmetry on this workload (a causal "
                                                             "mask breaks every one but usp's on zigzag, and "
                                                             "zigzag where the GPU prices its halves alike)",
                                                             req.algo)});
  if (use == SymmetryUse::On && !q)
    fail(Error{"--symmetry", fmt::format("cannot simulate one class of ranks for all: {}", q.error().message())});
  if (!q || (use == SymmetryUse::Auto && sched::estimate_plan(req).ops < kQuotientFromOps)) return {};
  return *q;
}

std::optional<sim::ChunkSolution> solve_chunks(sched::PlanRequest& req, const topo::Topology& t,
                                               const sim::ChunkSolveOptions& solve) {
  if (req.workload.layout != ir::Layout::Balanced || !req.workload.chunk_map.empty()) return std::nullopt;
  if (req.ranks > t.num_gpus())
    fail(Error{"--ranks", fmt::format("{} ranks: {} has {} GPUs", req.ranks, t.name, t.num_gpus())});
  // Each candidate is planned and simulated in full (one at a time): the budget of one simulation holds.
  check_plan_budget(req, sched::kSimBytesPerOp, "each of the chunk solver's simulations");
  auto s = sim::solve_chunk_map(req, t, solve);
  if (!s) fail(s.error());
  req.workload.chunk_map = s->chunk_map;
  return std::move(s).value();
}

sim::Evaluation run_one(const std::string& algo, const ir::Workload& w, const topo::Topology& t, int domains, int ranks,
                        SymmetryUse use, const std::vector<std::int32_t>& gpus, const sim::ChunkSolveOptions& solve) {
  auto req = sim::normalised_request({algo, w, ranks, domains});
  auto chunks = solve_chunks(req, t, solve);
  if (auto s = sched::check_request(req); !s) fail(s.error());
  if (!gpus.empty() && use == SymmetryUse::On)
    fail(Error{"--symmetry", "a --gpus map places every rank by hand: it is simulated rank by rank"});
  const ir::RankSymmetry q = gpus.empty() ? quotient_for(req, t, use) : ir::RankSymmetry{};
  // The simulator keeps times and state per op: about 30 bytes an op beside the plan (measured:
  // 148 bytes an op in all for a 3.1M-op ring, 123 for a 2.1M-op charm); 60 leaves a margin.
  check_plan_budget(req, sched::kSimBytesPerOp, "the simulation", q);
  // Runs at cluster scale take seconds to minutes: a progress line past the first second.
  ProgressLine progress;
  const double estimate = q.active() ? sched::estimate_quotient_plan(req, q).ops : sched::estimate_plan(req).ops;
  auto planned = [&](std::size_t ops) {
    progress.update([&] {
      return fmt::format("charm: planning {}: {} of about {} ops, {:.0f} s", algo, approx(double(ops)),
                         approx(estimate), progress.elapsed());
    });
  };
  ir::Plan plan = unwrap(sched::make_plan(req, q, nullptr, planned));
  plan.gpus = gpus;
  // The simulator indexes the plan before its first op runs (seconds at a few million ops).
  progress.update([&] {
    return fmt::format("charm: preparing the simulation of {}: {} ops, {:.0f} s", algo, approx(double(plan.size())),
                       progress.elapsed());
  });
  sim::SimOptions options;
  options.progress = [&](std::size_t done, std::size_t total) {
    progress.update([&] {
      return fmt::format("charm: simulating {}: {:.0f}% of {} ops, {:.0f} s", algo,
                         100.0 * double(done) / double(std::max<std::size_t>(total, 1)), approx(double(total)),
                         progress.elapsed());
    });
  };
  auto r = sim::evaluate_plan(std::move(plan), t, options);
  progress.finish();
  if (!r) throw RuntimeFailure{r.error().message()};
  r->chunks = std::move(chunks);
  return std::move(r).value();
}

sim::Evaluation run_deployment(const std::string& algo, const ir::Workload& w, const topo::Topology& t, int domains,
                               const sched::Layout& l, SymmetryUse use, bool attention_block) {
  const ir::Workload group_w = unwrap(sched::group_workload(w, l));
  const auto req = sim::normalised_request({algo, group_w, l.cp, domains});
  if (auto s = sched::check_request(req); !s) fail(s.error());
  // Whole groups stand for the others where the layout's rotation is one the topology has; as for one
  // group, --symmetry auto keeps every rank below a million ops.
  const auto e = sched::estimate_plan(req);
  int copies = l.groups();
  if (use == SymmetryUse::On || (use == SymmetryUse::Auto && e.ops * l.groups() >= kQuotientFromOps)) {
    const auto q = sim::deployment_copies(l, t);
    if (q) copies = *q;
    if (use == SymmetryUse::On && !q)
      fail(Error{"--symmetry", fmt::format("cannot simulate a class of CP groups for all: {}", q.error().message())});
  }
  check_budget((e.plan_bytes + sched::kSimBytesPerOp * e.ops) * (copies + 1),
               fmt::format("the simulation of {} CP group{} ({} on {} ranks each: about {:.2g} ops)", copies,
                           copies == 1 ? "" : "s", algo, l.cp, e.ops * copies),
               "--cp");
  auto r = sim::evaluate_deployment(req, l, copies, t, attention_block ? &w : nullptr);
  if (!r) throw RuntimeFailure{r.error().message()};
  return std::move(r).value();
}

sim::Evaluation run_simulation(std::optional<ir::Plan> file_plan, const std::string& algo, const ir::Workload& w,
                               const ClusterFlags& cluster, const topo::Topology& t, SymmetryUse use,
                               const sim::ChunkSolveOptions& solve) {
  if (!file_plan) {
    if (const auto layout = cluster.layout_for(t)) {
      if (w.layout == ir::Layout::Balanced)
        fail(Error{"--layout", "the balanced layout is solved for one CP group; drop --cp / --tp or use zigzag"});
      return run_deployment(algo, w, t, cluster.domains_for(t), *layout, use, cluster.tp != 0);
    }
    return run_one(algo, w, t, cluster.domains_for(t), cluster.ranks_for(t), use, cluster.gpu_map(t), solve);
  }
  if (file_plan->ranks > t.num_gpus())
    fail(Error{"--plan", fmt::format("the plan has {} ranks; {} has {} GPUs", file_plan->ranks, t.name, t.num_gpus())});
  place_file_plan(*file_plan, cluster, t);
  auto e = sim::evaluate_plan(std::move(*file_plan), t);
  if (!e) throw RuntimeFailure{e.error().message()};
  return std::move(e).value();
}

void place_file_plan(ir::Plan& plan, const ClusterFlags& cluster, const topo::Topology& t) {
  const auto layout = cluster.layout_for(t);
  if (!plan.gpus.empty() && (layout || !cluster.gpus.empty()))
    fail(Error{layout ? (cluster.cp != 0 ? "--cp" : "--tp") : "--gpus",
               "the plan file places its ranks (its \"placement\"); drop the flag or the file's placement"});
  if (!cluster.gpus.empty()) {
    auto map = cluster.gpu_map(t);
    if (map.size() != std::size_t(plan.ranks))
      fail(Error{"--gpus", fmt::format("lists {} GPUs; the plan has {} ranks", map.size(), plan.ranks)});
    plan.gpus = std::move(map);
  } else if (layout) {
    if (layout->cp != plan.ranks)
      fail(Error{cluster.cp != 0 ? "--cp" : "--tp",
                 fmt::format("places CP groups of {} ranks; the plan has {} ranks", layout->cp, plan.ranks)});
    plan = sched::place_groups(plan, *layout, layout->groups());
  }
  if (auto st = sim::check_placement(plan, t); !st) fail(Error{"--plan", st.error().what});
}

}  // namespace charm::cli
