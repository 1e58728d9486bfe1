#pragma once
// One simulation as `charm simulate`, `charm compare` and the Python module ask for it, from a cluster value
// (app::Cluster) to an evaluation: a plan file placed on the topology, or an algorithm on a workload placed as
// the cluster says. No flags, no printing: errors are values (ErrorKind::Input for a refused request,
// ErrorKind::RunFailed for a simulation that failed) and progress goes to an observer.

#include <functional>
#include <optional>
#include <string>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/workload.hpp"
#include "sim/chunk_solver.hpp"
#include "sim/evaluate.hpp"
#include "sim/simulate_request.hpp"
#include "support/expected.hpp"
#include "tools/app/cluster.hpp"
#include "topologies/topology.hpp"

namespace charm::app {

/// Told how far a simulation has got, on the caller's thread; may be empty.
using ProgressSink = std::function<void(const sim::RunProgress&)>;

/// `algo` on `w` as `cluster` places it on `t` (every CP group of a --cp / --tp layout, one group by a
/// --gpus map, or one group on the first GPUs), within the cluster's memory budget; a balanced layout's chunk
/// map solved first (the evaluation's `chunks`).
[[nodiscard]] Expected<sim::Evaluation> simulate_algorithm(const std::string& algo, const ir::Workload& w,
                                                           const Cluster& cluster, const topo::Topology& t,
                                                           sched::SymmetryUse use, const sim::ChunkSolveOptions& solve,
                                                           const ProgressSink& progress);

/// A plan file's plan, placed on `t` by place_file_plan and simulated.
[[nodiscard]] Expected<sim::Evaluation> simulate_plan_file(ir::Plan plan, const Cluster& cluster,
                                                           const topo::Topology& t);

/// Where a plan file's ranks run: its own placement, a --gpus map, or every CP group of a --cp / --tp
/// layout (the file is one group's plan, on the group's share of the heads); by default GPU r. A
/// placement from both the file and a flag, or one the topology cannot hold, is refused.
[[nodiscard]] Status place_file_plan(ir::Plan& plan, const Cluster& cluster, const topo::Topology& t);

}  // namespace charm::app
