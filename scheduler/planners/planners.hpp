#pragma once
// The planners: compile an algorithm, a workload and a cluster shape into a plan, in stages a request
// passes once each: checked (request.hpp: CheckedRequest), sized (estimate.hpp: its PlanEstimate, judged by a
// MemoryBudget), its symmetry found (plan_symmetry.hpp) and planned (here: make_plan, the pass driver).

#include <functional>

#include "scheduler/ir/plan.hpp"
#include "scheduler/planners/estimate.hpp"
#include "scheduler/planners/plan_symmetry.hpp"
#include "scheduler/planners/request.hpp"

namespace charm::sched {

/// Builds the plan; errors (exit code 2 material) name the flag at fault.
[[nodiscard]] Expected<ir::Plan> make_plan(const PlanRequest& req);
/// What building a quotient plan took besides the plan (measured, where estimate_quotient_plan guesses).
struct QuotientStats {
  std::size_t phantom_buffers = 0;  // buffers the planner made on phantom ranks
  std::size_t phantom_bytes = 0;    // the heap memory that held them
};
/// The quotient plan under `quotient` (checked by Quotient::of), built without the full plan: it
/// equals ir::quotient_of(make_plan(req), quotient), op for op. An inactive `quotient` gives the full plan.
/// Told the ops built so far and the estimate of all (estimate_plan's), now and then while a plan is built
/// (every PlanBuilder::kProgressOps).
using PlanProgress = std::function<void(std::size_t built, double estimated)>;
[[nodiscard]] Expected<ir::Plan> make_plan(const PlanRequest& req, ir::RankSymmetry quotient,
                                           QuotientStats* stats = nullptr, const PlanProgress& progress = {});
/// The same for a checked request and quotient: planned as they are, with no check again.
[[nodiscard]] Expected<ir::Plan> make_plan(const CheckedRequest& req, const Quotient& quotient = {},
                                           QuotientStats* stats = nullptr, const PlanProgress& progress = {});

}  // namespace charm::sched
