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

Expected<ir::RankSymmetry> quotient_for(const sched::CheckedRequest& req, const topo::Topology& t, SymmetryUse use) {
  if (use == SymmetryUse::Off) return ir::RankSymmetry{};
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
  if (!q || (use == SymmetryUse::Auto && req.estimate().ops < kQuotientFromOps)) return ir::RankSymmetry{};
  return *q;
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
/// One group, its request checked: the symmetry, the memory budget, the plan, the simulation.
Expected<Evaluation> simulate_group(const sched::CheckedRequest& req, const SimulationRequest& r,
                                    const topo::Topology& t) {
  if (!r.gpus.empty() && r.symmetry == SymmetryUse::On)
    return Error{Field::Symmetry, "a --gpus map places every rank by hand: it is simulated rank by rank"};
  ir::RankSymmetry q;
  if (r.gpus.empty()) {
    auto got = quotient_for(req, t, r.symmetry);
    if (!got) return got.error();
    q = *got;
  }
  // The plan and the simulator's state per op (kSimBytesPerOp) within the budget.
  if (auto s = r.budget.fits_plan(req, sched::kSimBytesPerOp, "the simulation", q); !s) return s.error();
  const auto tell = [&](RunProgress::Stage stage, std::size_t done, double total) {
    if (r.progress) r.progress(RunProgress{stage, done, total});
  };
  auto plan = sched::make_plan(req, q, nullptr, [&](std::size_t built, double estimated) {
    tell(RunProgress::Stage::Planning, built, estimated);
  });
  if (!plan) return plan.error();
  plan->gpus = r.gpus;
  // The simulator indexes the plan before its first op runs (seconds at a few million ops).
  tell(RunProgress::Stage::Indexing, 0, double(plan->size()));
  SimOptions options;
  options.progress = [&](std::size_t done, std::size_t total) {
    tell(RunProgress::Stage::Simulating, done, double(total));
  };
  auto e = evaluate_plan(std::move(plan).value(), t, options);
  if (!e) return run_failed(e.error());
  return e;
}

/// Every CP group of `l` at once (by whole groups' rotation where the layout and the topology share one).
Expected<Evaluation> simulate_deployment(const SimulationRequest& r, const sched::Layout& l, const topo::Topology& t) {
  // How many whole groups stand for the others, where the layout's rotation is one the topology has.
  const Expected<int> rotation = deployment_copies(l, t);
  const auto group_w = sched::group_workload(r.plan.workload, l);
  if (!group_w) return group_w.error();
  const auto group = sched::CheckedRequest::check({r.plan.algo, *group_w, l.cp, r.plan.domains});
  if (!group) return group.error();
  const sched::PlanRequest& req = group->get();
  // As for one group, --symmetry auto keeps every rank below a million ops.
  const sched::PlanEstimate& e = group->estimate();
  int copies = l.groups();
  const SymmetryUse use = r.symmetry;
  if (use == SymmetryUse::On || (use == SymmetryUse::Auto && e.ops * l.groups() >= kQuotientFromOps)) {
    if (rotation) copies = *rotation;
    if (use == SymmetryUse::On && !rotation)
      return Error{Field::Symmetry,
                   fmt::format("cannot simulate a class of CP groups for all: {}", rotation.error().message())};
  }
  if (auto s = r.budget.fits(sched::simulation_bytes(e, copies),
                             fmt::format("the simulation of {} CP group{} ({} on {} ranks each: about {:.2g} ops)",
                                         copies, copies == 1 ? "" : "s", req.algo, l.cp, e.ops * copies),
                             Field::Cp);
      !s)
    return s.error();
  auto ev = evaluate_deployment(*group, l, copies, t, r.attention_block ? &r.plan.workload : nullptr);
  if (!ev) return run_failed(ev.error());
  return ev;
}

}  // namespace

Expected<Evaluation> simulate_request(const SimulationRequest& r, const topo::Topology& t) {
  if (r.layout) {
    if (r.plan.workload.layout == ir::Layout::Balanced)
      return Error{Field::Layout, "the balanced layout is solved for one CP group; drop --cp / --tp or use zigzag"};
    return simulate_deployment(r, *r.layout, t);
  }
  const auto checked = sched::CheckedRequest::check(r.plan);
  if (!checked) return checked.error();
  return simulate_group(*checked, r, t);
}

}  // namespace charm::sim
