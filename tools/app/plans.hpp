#pragma once
// A plan as a person asks for one, below the application layer (no simulator): from an algorithm, a cluster
// shape and the workload as written, or from a plan file. The command's plan flags and the Python module's
// plan() and simulate(plan=) make their plans here, and every refusal comes back as a value naming its flag.

#include <string>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/validated_plan.hpp"
#include "scheduler/planners/estimate.hpp"
#include "scheduler/planners/request.hpp"
#include "support/expected.hpp"
#include "tools/app/workload.hpp"

namespace charm::app {

/// The ranks and domains of a plan asked for without them (`charm plan`, `run`, Python's plan()).
inline constexpr int kDefaultRanks = 8;
inline constexpr int kDefaultDomains = 1;

/// The request of `algo` on `ranks` ranks in `domains` domains over the workload `w` (read, and its layout checked
/// against the algorithm's), normalised as the planner runs it. Errors: --domains below 1, the workload's.
[[nodiscard]] Expected<sched::PlanRequest> plan_request(const std::string& algo, int ranks, int domains,
                                                        const WorkloadSpec& w);

/// The refusal of a balanced layout whose chunk map is not solved yet where there is no topology to solve it on
/// (an error of --topology).
[[nodiscard]] Error balanced_needs_topology();

/// The plan of `req`, checked (sched::CheckedRequest) and within `budget` with `extra_bytes_per_op` more per op
/// for what the caller does with it (`what`: "the plan and its JSON"), before it is built.
[[nodiscard]] Expected<ir::Plan> plan_within(const sched::PlanRequest& req, const sched::MemoryBudget& budget,
                                             double extra_bytes_per_op, const std::string& what);

/// Whether reading the plan file at `path` (estimated from its size) fits `budget`; an error of `flag` if not.
[[nodiscard]] Status fits_plan_file(const sched::MemoryBudget& budget, const std::string& path,
                                    const std::string& flag);
/// The plan file at `path` read, within `budget` (errors of --plan), not yet proved.
[[nodiscard]] Expected<ir::Plan> read_plan_file(const std::string& path, const sched::MemoryBudget& budget);
/// `plan`, read from the file at `path`, proved (what the executors and the simulator trust); a rule it breaks is
/// --plan's error.
[[nodiscard]] Expected<ir::ValidatedPlan> proved_plan_file(ir::Plan plan, const std::string& path);

}  // namespace charm::app
