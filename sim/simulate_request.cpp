#include "sim/simulate_request.hpp"

#include <fmt/format.h>

#include <utility>

#include "sim/simulator.hpp"

namespace charm::sim {

namespace {
/// Full plans at least this large are simulated by their quotient under `--symmetry auto`: below,
/// every rank's ops are kept (traces and critical paths name every rank) and the run is quick anyway.
constexpr double kQuotientFromOps = 1 << 20;

/// An error of the simulation, not of the request.
Error run_failed(Error e) {
  e.kind = ErrorKind::RunFailed;
  return e;
}
}  // namespace

Expected<sched::Quotient> quotient_for(const sched::CheckedRequest& req, const topo::Topology& t, SymmetryUse use) {
  if (use == SymmetryUse::Off) return sched::Quotient{};
  const ir::RankSymmetry plan_sym = plan_symmetry_on(req, t);
  const auto q =
      plan_sym.active()
          ? topology_quotient(plan_sym, t, req->ranks)
          : Expected<ir::RankSymmetry>(Error{"", fmt::format("{} has no rank symmetry on this workload (a causal "
                                                             "mask breaks every one but usp's on zigzag, and "
                                                             "zigzag where the GPU prices its halves alike)",
                                                             req->algo)});
  if (use == SymmetryUse::On && !q)
    return Error{Field::Symmetry, fmt::format("cannot simulate one class of ranks for all: {}", q.error().message())};
  if (!q || (use == SymmetryUse::Auto && req.estimate().ops < kQuotientFromOps)) return sched::Quotient{};
  return sched::Quotient::of(req, *q);
}

Expected<std::optional<ChunkSolution>> solve_chunks(sched::PlanRequest& req, const topo::Topology& t,
                                                    const ChunkSolveOptions& solve, const sched::MemoryBudget& budget) {
  req = sched::normalised(std::move(req));
  if (req.workload.layout != ir::Layout::Balanced || !req.workload.chunk_map.empty())
    return std::optional<ChunkSolution>();
  if (req.ranks > t.num_gpus())
    return Error{Field::Ranks, fmt::format("{} ranks: {} has {} GPUs", req.ranks, t.name, t.num_gpus())};
  // Each candidate is planned and simulated in full (one at a time): the budget of one simulation holds.
  if (auto s = budget.fits_plan(req, sched::kSimBytesPerOp, "each of the chunk solver's simulations"); !s)
    return s.error();
  auto s = solve_chunk_map(req, t, solve);
  if (!s) {
    Error e = s.error();
    e.kind = ErrorKind::Input;  // no chunk map of this request plans and simulates
    return e;
  }
  req.workload.chunk_map = s->chunk_map;
  return std::optional<ChunkSolution>(std::move(s).value());
}

namespace {
/// The run's one CP group, checked: the request itself, or a deployment's group (l.cp ranks, TP's share of the
/// heads: sched::group_workload, whose refusal is --tp's).
Expected<sched::CheckedRequest> checked_group(const SimulationRequest& r) {
  sched::PlanRequest group = r.plan;
  if (r.layout) {
    if (r.plan.workload.layout == ir::Layout::Balanced) return balanced_deployment_refusal();
    auto w = sched::group_workload(r.plan.workload, *r.layout);
    if (!w) return w.error();
    group = {r.plan.algo, std::move(w).value(), r.layout->cp, r.plan.domains};
  }
  return sched::CheckedRequest::check(group);
}

/// Which of the run's ranks the simulation keeps: one group's quotient (`quotient`; inactive: every rank), or how
/// many of a deployment's whole CP groups stand for the others (`copies`).
struct SimulatedRanks {
  sched::Quotient quotient;
  int copies = 1;
};

Expected<SimulatedRanks> simulated_ranks(const sched::CheckedRequest& group, const SimulationRequest& r,
                                         const topo::Topology& t) {
  SimulatedRanks kept;
  const SymmetryUse use = r.symmetry;
  if (!r.layout) {
    if (!r.gpus.empty() && use == SymmetryUse::On)
      return Error{Field::Symmetry, "a --gpus map places every rank by hand: it is simulated rank by rank"};
    if (r.gpus.empty()) {
      auto q = quotient_for(group, t, use);
      if (!q) return q.error();
      kept.quotient = *q;
    }
    return kept;
  }
  // As for one group, --symmetry auto keeps every rank below a million ops.
  const sched::Layout& l = *r.layout;
  kept.copies = l.groups();
  if (use == SymmetryUse::On || (use == SymmetryUse::Auto && group.estimate().ops * l.groups() >= kQuotientFromOps)) {
    const Expected<int> rotation = deployment_copies(l, t);
    if (rotation) kept.copies = *rotation;
    if (use == SymmetryUse::On && !rotation)
      return Error{Field::Symmetry,
                   fmt::format("cannot simulate a class of CP groups for all: {}", rotation.error().message())};
  }
  return kept;
}

/// The plan and the simulator's state per op (kSimBytesPerOp) of the ranks kept, within the budget.
Status fits_budget(const sched::CheckedRequest& group, const SimulationRequest& r, const SimulatedRanks& kept) {
  if (!r.layout) return r.budget.fits_plan(group, sched::kSimBytesPerOp, "the simulation", kept.quotient.symmetry());
  const sched::PlanEstimate& e = group.estimate();
  return r.budget.fits(sched::simulation_bytes(e, kept.copies),
                       fmt::format("the simulation of {} CP group{} ({} on {} ranks each: about {:.2g} ops)",
                                   kept.copies, kept.copies == 1 ? "" : "s", group->algo, r.layout->cp,
                                   e.ops * kept.copies),
                       Field::Cp);
}

/// The run lowered: the group's plan on its GPUs (`r.gpus`, else GPU r), or placed as the deployment's groups kept.
Expected<LoweredRun> lowered(const sched::CheckedRequest& group, const SimulationRequest& r, const SimulatedRanks& kept,
                             const topo::Topology& t) {
  auto plan = sched::make_plan(group, kept.quotient, nullptr, [&](std::size_t built, double estimated) {
    if (r.progress) r.progress(RunProgress{RunProgress::Stage::Planning, built, estimated});
  });
  if (!plan) return plan.error();
  if (r.layout)
    return lower_deployment(*plan, *r.layout, kept.copies, t, r.attention_block ? &r.plan.workload : nullptr);
  plan->gpus = r.gpus;
  return LoweredRun{std::move(plan).value(), {}};
}
}  // namespace

Expected<Evaluation> simulate_request(const SimulationRequest& r, const topo::Topology& t) {
  const auto group = checked_group(r);
  if (!group) return group.error();
  const auto kept = simulated_ranks(*group, r, t);
  if (!kept) return kept.error();
  if (auto s = fits_budget(*group, r, *kept); !s) return s.error();
  auto run = lowered(*group, r, *kept, t);
  if (!run) return run.error();
  SimOptions options;
  if (r.progress) {
    // The simulator indexes the plan before its first op runs (seconds at a few million ops).
    r.progress(RunProgress{RunProgress::Stage::Indexing, 0, double(run->plan.size())});
    options.progress = [&](std::size_t done, std::size_t total) {
      r.progress(RunProgress{RunProgress::Stage::Simulating, done, double(total)});
    };
  }
  auto e = evaluate_lowered(std::move(run).value(), t, options);
  if (!e) return run_failed(e.error());
  return e;
}

}  // namespace charm::sim
