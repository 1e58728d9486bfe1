#pragma once
// One algorithm planned and simulated end to end, as `charm simulate` and the Python module run it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/layout.hpp"
#include "sim/evaluate.hpp"
#include "sim/simulate_request.hpp"
#include "support/enum_names.hpp"
#include "tools/app/cluster.hpp"
#include "tools/app/compare.hpp"
#include "tools/app/simulation.hpp"
#include "tools/cli_support.hpp"
#include "topologies/topology.hpp"

namespace charm::cli {

using sched::kSymmetryUseNames;
using sched::SymmetryUse;

/// A refused request (the planner's, the memory budget's: ErrorKind::Input) is the user's (UsageError, exit 2);
/// a simulation that failed (ErrorKind::RunFailed) is not (RuntimeFailure, exit 3).
template <class T>
T unwrap_run(Expected<T> e) {
  if (!e && e.error().kind == ErrorKind::RunFailed) throw RuntimeFailure{e.error().message()};
  return unwrap(std::move(e));
}

/// sim::simulate_request (its memory budget in `r.budget`) with this command's progress line (past its first
/// second).
[[nodiscard]] Expected<sim::Evaluation> simulate_shown(sim::SimulationRequest r, const topo::Topology& t);

/// app::run_compare with a progress line for each simulation; errors as unwrap_run says.
[[nodiscard]] std::vector<app::CompareRow> run_compare(const app::CompareRequest& r, const topo::Topology& t);

/// What `charm simulate` (and the Python module's simulate) runs, with this command's progress line: a plan
/// file (app::simulate_plan_file) or `algo` on `w` as the cluster places it (app::simulate_algorithm). Errors as
/// simulate's.
[[nodiscard]] sim::Evaluation run_simulation(std::optional<ir::Plan> file_plan, const std::string& algo,
                                             const ir::Workload& w, const app::Cluster& cluster,
                                             const topo::Topology& t, SymmetryUse use,
                                             const sim::ChunkSolveOptions& solve = {});

}  // namespace charm::cli
