#pragma once
// A run planned the way the simulator runs it: its CP group checked (a deployment's group first takes TP's
// share of the heads), the ranks the simulation keeps chosen (the plan's rank symmetry, or whole CP groups,
// coarsened to the machine's blocks), their memory judged by the budget, and the plan built and placed on its
// GPUs. The simulator says what its machine offers (RunTarget), then runs what comes back
// (sim::simulate_request); nothing here reads a topology or a cost model.

#include <cstdint>
#include <optional>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/symmetry.hpp"
#include "scheduler/planners/estimate.hpp"
#include "scheduler/planners/layout.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/planners/request.hpp"
#include "support/enum_names.hpp"

namespace charm::sched {

/// Whether a run may simulate one class of symmetric ranks for all (a quotient plan).
enum class SymmetryUse { Auto, On, Off };
inline constexpr EnumName<SymmetryUse> kSymmetryUseNames[] = {
    {"auto", SymmetryUse::Auto}, {"on", SymmetryUse::On}, {"off", SymmetryUse::Off}};

/// One run: one group of ranks on the machine's first GPUs (or on `gpus`), or every CP group of a deployment's
/// `layout` at once. A balanced layout's chunk map is solved before: the request carries it in its workload.
struct RunRequest {
  PlanRequest plan;                // the algorithm, the workload (a deployment's: the whole model's), ranks, domains
  std::optional<Layout> layout;    // a deployment's CP x TP layout: layout.cp ranks a group (plan.ranks unused)
  std::vector<std::int32_t> gpus;  // one group: rank r on GPU gpus[r] (placed by hand: rank by rank); empty: GPU r
  SymmetryUse symmetry = SymmetryUse::Auto;
  MemoryBudget budget;
};

/// What the machine a run is planned for offers it, as the simulator reads it off its topology and cost model.
struct RunTarget {
  bool zigzag_halves_alike = false;  // its GPU prices the zigzag layout's two half blocks alike (plan_symmetry)
  ir::BlockSymmetry blocks;          // its blocks of GPUs, and whether its routes repeat with them
};

/// The symmetry a simulation of `req` on `target` may run one class of ranks for: the plan's (plan_symmetry; by
/// cost where the target prices the zigzag halves alike) coarsened to the target's blocks (ir::coarsen_to_blocks);
/// else why there is none.
[[nodiscard]] Expected<ir::RankSymmetry> target_symmetry(const CheckedRequest& req, const RunTarget& target);

/// The run's plan, each stage once, the same for one group and a deployment: the CP group checked
/// (CheckedRequest; a deployment's group takes TP's share of the heads, group_workload, whose refusal is
/// --tp's; a balanced layout is refused for a deployment); the ranks kept (one group's quotient where
/// `r.symmetry` and the symmetries allow one, or the whole CP groups that stand for the others where the
/// layout's rotation is one the machine's blocks have: deployment_copies); their plan and the simulator's state
/// per op within `r.budget` (kSimBytesPerOp); the plan built (`progress` told as make_plan tells it) and placed:
/// on `r.gpus` (else GPU r), or as the deployment's groups kept (place_groups).
/// Under SymmetryUse::Auto, every rank is kept below a million ops (traces and critical paths then name every
/// rank, and the run is quick anyway); SymmetryUse::On refuses (an error of --symmetry) where no symmetry serves.
[[nodiscard]] Expected<ir::Plan> plan_run(const RunRequest& r, const RunTarget& target,
                                          const PlanProgress& progress = {});

}  // namespace charm::sched
