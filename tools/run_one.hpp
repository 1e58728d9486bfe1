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
#include "tools/cluster_flags.hpp"
#include "topologies/topology.hpp"

namespace charm::cli {

using sim::kSymmetryUseNames;
using sim::SymmetryUse;

/// sim::simulate_request with this command's memory budget and progress line. A planner refusal or a plan over
/// the memory budget is the user's (UsageError, exit 2); a simulator failure is not (RuntimeFailure, exit 3).
/// `gpus` (optional): rank r on GPU gpus[r] (one group placed by hand; simulated rank by rank).
/// The balanced layout without a chunk map has one solved first (sim::solve_chunk_map, with `solve`).
[[nodiscard]] sim::Evaluation run_one(const std::string& algo, const ir::Workload& w, const topo::Topology& t,
                                      int domains, int ranks, SymmetryUse use = SymmetryUse::Auto,
                                      const std::vector<std::int32_t>& gpus = {},
                                      const sim::ChunkSolveOptions& solve = {});

/// `req`'s chunk map solved on `t` where its layout is balanced and it has none (within the solver's time
/// budget, --solve-ms); the solution, or nothing where there was nothing to solve. Errors are the user's (UsageError).
std::optional<sim::ChunkSolution> solve_chunks(sched::PlanRequest& req, const topo::Topology& t,
                                               const sim::ChunkSolveOptions& solve);

/// A deployment: every CP group of layout `l` on `t` runs `algo` at once (TP splits the heads, so each
/// group plans w with heads / TP), simulated together (by whole groups' rotation where the layout and the
/// topology share one: the cost of those groups, not of the cluster). Errors as run_one's; heads or kv
/// heads that TP does not divide are --tp's. `attention_block` (a --tp given): the times are whole attention
/// blocks', tensor parallelism's collectives and the projections' GEMMs included (sim::Evaluation::tp_block).
[[nodiscard]] sim::Evaluation run_deployment(const std::string& algo, const ir::Workload& w, const topo::Topology& t,
                                             int domains, const sched::Layout& l, SymmetryUse use = SymmetryUse::Auto,
                                             bool attention_block = false);

/// What `charm simulate` (and the Python module's simulate) runs: a plan file, placed on `t` by
/// place_file_plan, or `algo` on `w` as the cluster flags place it: every CP group of a --cp / --tp
/// layout, one group by a --gpus map, or one group on the first GPUs. Errors as run_one's.
[[nodiscard]] sim::Evaluation run_simulation(std::optional<ir::Plan> file_plan, const std::string& algo,
                                             const ir::Workload& w, const ClusterFlags& cluster,
                                             const topo::Topology& t, SymmetryUse use,
                                             const sim::ChunkSolveOptions& solve = {});

/// Where a plan file's ranks run: its own placement, a --gpus map, or every CP group of a --cp / --tp
/// layout (the file is one group's plan, on the group's share of the heads); by default GPU r. A
/// placement from both the file and a flag, or one the topology cannot hold, is refused (UsageError).
void place_file_plan(ir::Plan& plan, const ClusterFlags& cluster, const topo::Topology& t);

}  // namespace charm::cli
