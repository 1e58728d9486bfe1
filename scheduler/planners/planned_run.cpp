#include "scheduler/planners/planned_run.hpp"

#include <fmt/format.h>

#include <utility>

#include "scheduler/planners/plan_symmetry.hpp"

namespace charm::sched {

namespace {
/// Full plans at least this large are simulated by their quotient under SymmetryUse::Auto: below, every rank's
/// ops are kept (traces and critical paths name every rank) and the run is quick anyway.
constexpr double kQuotientFromOps = 1 << 20;

/// The run's one CP group, checked: the request itself, or a deployment's group (l.cp ranks, TP's share of the
/// heads: group_workload, whose refusal is --tp's).
Expected<CheckedRequest> checked_group(const RunRequest& r) {
  PlanRequest group = r.plan;
  if (r.layout) {
    if (r.plan.workload.layout == ir::Layout::Balanced) return balanced_deployment_refusal();
    auto w = group_workload(r.plan.workload, *r.layout);
    if (!w) return w.error();
    group = {r.plan.algo, std::move(w).value(), r.layout->cp, r.plan.domains};
  }
  return CheckedRequest::check(group);
}

/// The quotient to simulate one group by, if `use` and the symmetries allow one; an error of --symmetry where
/// `use` is On and none does.
Expected<Quotient> group_quotient(const CheckedRequest& req, const RunTarget& target, SymmetryUse use) {
  if (use == SymmetryUse::Off) return Quotient{};
  const auto q = target_symmetry(req, target);
  if (use == SymmetryUse::On && !q)
    return Error{Field::Symmetry, fmt::format("cannot simulate one class of ranks for all: {}", q.error().message())};
  if (!q || (use == SymmetryUse::Auto && req.estimate().ops < kQuotientFromOps)) return Quotient{};
  return Quotient::of(req, *q);
}

/// Which of the run's ranks the simulation keeps: one group's quotient (`quotient`; inactive: every rank), or how
/// many of a deployment's whole CP groups stand for the others (`copies`).
struct KeptRanks {
  Quotient quotient;
  int copies = 1;
};

Expected<KeptRanks> kept_ranks(const CheckedRequest& group, const RunRequest& r, const RunTarget& target) {
  KeptRanks kept;
  const SymmetryUse use = r.symmetry;
  if (!r.layout) {
    if (!r.gpus.empty() && use == SymmetryUse::On)
      return Error{Field::Symmetry, "a --gpus map places every rank by hand: it is simulated rank by rank"};
    if (r.gpus.empty()) {
      auto q = group_quotient(group, target, use);
      if (!q) return q.error();
      kept.quotient = *q;
    }
    return kept;
  }
  // As for one group, SymmetryUse::Auto keeps every rank below a million ops.
  const Layout& l = *r.layout;
  kept.copies = l.groups();
  if (use == SymmetryUse::On || (use == SymmetryUse::Auto && group.estimate().ops * l.groups() >= kQuotientFromOps)) {
    const Expected<int> rotation = deployment_copies(l, target.blocks);
    if (rotation) kept.copies = *rotation;
    if (use == SymmetryUse::On && !rotation)
      return Error{Field::Symmetry,
                   fmt::format("cannot simulate a class of CP groups for all: {}", rotation.error().message())};
  }
  return kept;
}

/// The plan and the simulator's state per op (kSimBytesPerOp) of the ranks kept, within the budget.
Status fits_budget(const CheckedRequest& group, const RunRequest& r, const KeptRanks& kept) {
  if (!r.layout) return r.budget.fits_plan(group, kSimBytesPerOp, "the simulation", kept.quotient.symmetry());
  const PlanEstimate& e = group.estimate();
  return r.budget.fits(simulation_bytes(e, kept.copies),
                       fmt::format("the simulation of {} CP group{} ({} on {} ranks each: about {:.2g} ops)",
                                   kept.copies, kept.copies == 1 ? "" : "s", group->algo, r.layout->cp,
                                   e.ops * kept.copies),
                       Field::Cp);
}
}  // namespace

Expected<ir::RankSymmetry> target_symmetry(const CheckedRequest& req, const RunTarget& target) {
  const ir::RankSymmetry plan_sym = plan_symmetry(req, target.zigzag_halves_alike);
  if (!plan_sym.active())
    return Error{"", fmt::format("{} has no rank symmetry on this workload (a causal mask breaks every one but "
                                 "usp's on zigzag, and zigzag where the GPU prices its halves alike)",
                                 req->algo)};
  return ir::coarsen_to_blocks(plan_sym, target.blocks, req->ranks);
}

Expected<ir::Plan> plan_run(const RunRequest& r, const RunTarget& target, const PlanProgress& progress) {
  const auto group = checked_group(r);
  if (!group) return group.error();
  const auto kept = kept_ranks(*group, r, target);
  if (!kept) return kept.error();
  if (auto s = fits_budget(*group, r, *kept); !s) return s.error();
  auto plan = make_plan(*group, kept->quotient, nullptr, progress);
  if (!plan) return plan.error();
  if (r.layout) return place_groups(*plan, *r.layout, kept->copies);
  plan->gpus = r.gpus;
  return plan;
}

}  // namespace charm::sched
