#include "tools/app/simulation.hpp"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "scheduler/planners/layout.hpp"
#include "sim/simulator.hpp"

namespace charm::app {

Expected<sim::Evaluation> simulate_algorithm(const std::string& algo, const ir::Workload& w, const Cluster& cluster,
                                             const topo::Topology& t, sched::SymmetryUse use,
                                             const sim::ChunkSolveOptions& solve, const ProgressSink& progress) {
  sim::SimulationRequest r;
  CHARM_TRY_ASSIGN(r.layout, cluster.layout_for(t));
  int ranks = 0;
  if (r.layout) {
    ranks = r.layout->cp;
  } else {
    CHARM_TRY_ASSIGN(ranks, cluster.ranks_for(t));
  }
  CHARM_TRY_LET(domains, cluster.domains_for(t));
  r.plan = {algo, w, ranks, domains};
  r.attention_block = r.layout && cluster.tp != 0;
  if (!r.layout) CHARM_TRY_ASSIGN(r.gpus, cluster.gpu_map(t));
  r.symmetry = use;
  CHARM_TRY_ASSIGN(r.budget, cluster.budget());
  r.progress = progress;
  // One group on the balanced layout: its chunk map first (a deployment refuses that layout).
  std::optional<sim::ChunkSolution> chunks;
  if (!r.layout) {
    sim::ChunkSolveOptions shown = solve;
    if (progress)
      shown.progress = [&](std::size_t tried, std::size_t most) {
        progress(sim::RunProgress{sim::RunProgress::Stage::SolvingChunks, tried, double(most)});
      };
    CHARM_TRY_ASSIGN(chunks, sim::solve_chunks(r.plan, t, shown, r.budget));
  }
  CHARM_TRY_LET(e, sim::simulate_request(r, t));
  e.chunks = std::move(chunks);
  return e;
}

Expected<sim::Evaluation> simulate_plan_file(ir::Plan plan, const Cluster& cluster, const topo::Topology& t) {
  if (plan.ranks > t.num_gpus())
    return Error{"--plan", fmt::format("the plan has {} ranks; {} has {} GPUs", plan.ranks, t.name, t.num_gpus())};
  if (auto s = place_file_plan(plan, cluster, t); !s) return s.error();
  auto e = sim::evaluate_plan(std::move(plan), t);
  if (!e) {
    Error failed = e.error();
    failed.kind = ErrorKind::RunFailed;  // the file was accepted: the simulation failed
    return failed;
  }
  return e;
}

Status place_file_plan(ir::Plan& plan, const Cluster& cluster, const topo::Topology& t) {
  CHARM_TRY_LET(layout, cluster.layout_for(t));
  const char* layout_flag = cluster.cp != 0 ? "--cp" : "--tp";
  if (!plan.gpus.empty() && (layout || !cluster.gpus.empty()))
    return Error{layout ? layout_flag : "--gpus",
                 "the plan file places its ranks (its \"placement\"); drop the flag or the file's placement"};
  if (!cluster.gpus.empty()) {
    CHARM_TRY_LET(map, cluster.gpu_map(t));
    if (map.size() != std::size_t(plan.ranks))
      return Error{"--gpus", fmt::format("lists {} GPUs; the plan has {} ranks", map.size(), plan.ranks)};
    plan.gpus = std::move(map);
  } else if (layout) {
    if (layout->cp != plan.ranks)
      return Error{layout_flag,
                   fmt::format("places CP groups of {} ranks; the plan has {} ranks", layout->cp, plan.ranks)};
    plan = sched::place_groups(plan, *layout, layout->groups());
  }
  if (auto st = sim::check_placement(plan, t); !st) return Error{"--plan", st.error().what};
  return {};
}

}  // namespace charm::app
