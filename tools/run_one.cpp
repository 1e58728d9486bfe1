#include "tools/run_one.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "scheduler/planners/layout.hpp"
#include "scheduler/planners/request.hpp"
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

/// The progress line of a run of `algo` at `p`, `elapsed` seconds in.
std::string progress_text(const std::string& algo, const sim::RunProgress& p, double elapsed) {
  switch (p.stage) {
  case sim::RunProgress::Stage::Planning:
    return fmt::format("charm: planning {}: {} of about {} ops, {:.0f} s", algo, approx(double(p.done)),
                       approx(p.total), elapsed);
  case sim::RunProgress::Stage::Indexing:
    return fmt::format("charm: preparing the simulation of {}: {} ops, {:.0f} s", algo, approx(p.total), elapsed);
  case sim::RunProgress::Stage::Simulating:
    break;
  }
  return fmt::format("charm: simulating {}: {:.0f}% of {} ops, {:.0f} s", algo,
                     100.0 * double(p.done) / std::max(p.total, 1.0), approx(p.total), elapsed);
}

/// A refused request is the user's (UsageError, exit 2); a simulation that failed is not (RuntimeFailure, exit 3).
sim::Evaluation unwrap_run(Expected<sim::Evaluation>&& e) {
  if (!e && e.error().kind == ErrorKind::RunFailed) throw RuntimeFailure{e.error().message()};
  return unwrap(std::move(e));
}
}  // namespace

sim::Evaluation simulate(sim::SimulationRequest r, const topo::Topology& t) {
  // Runs at cluster scale take seconds to minutes: a progress line past the first second.
  ProgressLine progress;
  r.progress = [&, algo = r.plan.algo](const sim::RunProgress& p) {
    progress.update([&] { return progress_text(algo, p, progress.elapsed()); });
  };
  auto e = sim::simulate_request(r, t);
  progress.finish();
  return unwrap_run(std::move(e));
}

sim::Evaluation run_simulation(std::optional<ir::Plan> file_plan, const std::string& algo, const ir::Workload& w,
                               const app::Cluster& cluster, const topo::Topology& t, SymmetryUse use,
                               const sim::ChunkSolveOptions& solve) {
  if (!file_plan) {
    sim::SimulationRequest r;
    r.layout = unwrap(cluster.layout_for(t));
    r.plan = {algo, w, r.layout ? r.layout->cp : unwrap(cluster.ranks_for(t)), unwrap(cluster.domains_for(t))};
    r.attention_block = r.layout && cluster.tp != 0;
    if (!r.layout) r.gpus = unwrap(cluster.gpu_map(t));
    r.symmetry = use;
    r.budget = unwrap(cluster.budget());
    // One group on the balanced layout: its chunk map first (a deployment refuses that layout).
    std::optional<sim::ChunkSolution> chunks;
    if (!r.layout) chunks = unwrap(sim::solve_chunks(r.plan, t, solve, r.budget));
    sim::Evaluation e = simulate(std::move(r), t);
    e.chunks = std::move(chunks);
    return e;
  }
  if (file_plan->ranks > t.num_gpus())
    fail(Error{"--plan", fmt::format("the plan has {} ranks; {} has {} GPUs", file_plan->ranks, t.name, t.num_gpus())});
  place_file_plan(*file_plan, cluster, t);
  auto e = sim::evaluate_plan(std::move(*file_plan), t);
  if (!e) throw RuntimeFailure{e.error().message()};
  return std::move(e).value();
}

void place_file_plan(ir::Plan& plan, const app::Cluster& cluster, const topo::Topology& t) {
  const auto layout = unwrap(cluster.layout_for(t));
  if (!plan.gpus.empty() && (layout || !cluster.gpus.empty()))
    fail(Error{layout ? (cluster.cp != 0 ? "--cp" : "--tp") : "--gpus",
               "the plan file places its ranks (its \"placement\"); drop the flag or the file's placement"});
  if (!cluster.gpus.empty()) {
    auto map = unwrap(cluster.gpu_map(t));
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
