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
#include "topologies/topology.hpp"

namespace charm::cli {

using sim::kSymmetryUseNames;
using sim::SymmetryUse;

/// sim::simulate_request (its memory budget in `r.budget`) with this command's progress line (past its first
/// second). A refused request (the planner's, the memory budget's) is the user's (UsageError, exit 2); a
/// simulator failure is not (RuntimeFailure, exit 3).
[[nodiscard]] sim::Evaluation simulate(sim::SimulationRequest r, const topo::Topology& t);

/// What `charm simulate` (and the Python module's simulate) runs: a plan file, placed on `t` by
/// place_file_plan, or `algo` on `w` as the cluster flags place it: every CP group of a --cp / --tp
/// layout, one group by a --gpus map, or one group on the first GPUs, within the cluster flags' --max-memory.
/// Errors as simulate's.
[[nodiscard]] sim::Evaluation run_simulation(std::optional<ir::Plan> file_plan, const std::string& algo,
                                             const ir::Workload& w, const app::Cluster& cluster,
                                             const topo::Topology& t, SymmetryUse use,
                                             const sim::ChunkSolveOptions& solve = {});

/// Where a plan file's ranks run: its own placement, a --gpus map, or every CP group of a --cp / --tp
/// layout (the file is one group's plan, on the group's share of the heads); by default GPU r. A
/// placement from both the file and a flag, or one the topology cannot hold, is refused (UsageError).
void place_file_plan(ir::Plan& plan, const app::Cluster& cluster, const topo::Topology& t);

}  // namespace charm::cli
