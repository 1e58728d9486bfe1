#pragma once
// One algorithm on one topology as `charm simulate` runs it, from the request to the evaluation, each stage
// once: the balanced layout's chunk map solved (solve_chunks, a stage of its own before), the request checked
// (sched::CheckedRequest), the rank symmetry chosen, the plan's memory judged by the budget, the plan built and
// simulated. The command line and the Python module call it through tools/run_one.hpp; nothing here reads
// flags or prints.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "scheduler/planners/estimate.hpp"
#include "scheduler/planners/layout.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/planners/request.hpp"
#include "sim/chunk_solver.hpp"
#include "sim/evaluate.hpp"
#include "support/enum_names.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

/// Whether a run may simulate one class of symmetric ranks for all (sim::simulate on a quotient plan).
enum class SymmetryUse { Auto, On, Off };
inline constexpr EnumName<SymmetryUse> kSymmetryUseNames[] = {
    {"auto", SymmetryUse::Auto}, {"on", SymmetryUse::On}, {"off", SymmetryUse::Off}};

/// How far a run has got, for a progress line.
struct RunProgress {
  enum class Stage { Planning, Indexing, Simulating };
  Stage stage = Stage::Planning;
  std::size_t done = 0;  // ops planned (Planning) or simulated (Simulating)
  double total = 0;      // ops: the estimate while planning, the plan's after
};

/// One group of ranks: `plan` (the algorithm, workload, ranks, domains, checked; on the balanced layout with
/// its chunk map) on `t`'s first GPUs, or on `gpus`.
struct SimulationRequest {
  sched::CheckedRequest plan;
  std::vector<std::int32_t> gpus;  // rank r on GPU gpus[r] (placed by hand: simulated rank by rank); empty: GPU r
  SymmetryUse symmetry = SymmetryUse::Auto;
  sched::MemoryBudget budget;
  std::function<void(const RunProgress&)> progress;  // told now and then on the caller's thread; may be empty
};

/// The quotient to simulate `req` by on `t`, if `use` and the symmetries allow one; an error of --symmetry
/// where `use` is On and none does.
[[nodiscard]] Expected<ir::RankSymmetry> quotient_for(const sched::CheckedRequest& req, const topo::Topology& t,
                                                      SymmetryUse use);

/// `req`'s chunk map solved on `t` where its layout is balanced and it has none (`req` normalised first, as the
/// planner runs it); the solution, or nothing where there was nothing to solve. Errors are the request's
/// (ErrorKind::Input).
[[nodiscard]] Expected<std::optional<ChunkSolution>> solve_chunks(sched::PlanRequest& req, const topo::Topology& t,
                                                                  const ChunkSolveOptions& solve,
                                                                  const sched::MemoryBudget& budget);

/// Plans and simulates one group. A refusal of the request (the symmetry's, the memory budget's) is an
/// ErrorKind::Input error; a simulation that fails is ErrorKind::RunFailed.
[[nodiscard]] Expected<Evaluation> simulate_request(const SimulationRequest& r, const topo::Topology& t);

/// A deployment: every CP group of `layout` runs `model`'s algorithm at once, each on the whole model's
/// workload with TP's share of the heads (sched::group_workload) over layout.cp ranks and `model.domains`.
struct DeploymentRequest {
  sched::PlanRequest model;  // the algorithm, the whole model's workload and the domains (its ranks: unused)
  sched::Layout layout;
  SymmetryUse symmetry = SymmetryUse::Auto;
  sched::MemoryBudget budget;
  bool attention_block = false;  // whole attention blocks' times, TP's collectives and GEMMs included (--tp given)
};

/// Plans and simulates a deployment's CP groups together (by whole groups' rotation where the layout and the
/// topology share one). Heads or kv heads that TP does not divide are --tp's errors; the rest as
/// simulate_request's.
[[nodiscard]] Expected<Evaluation> simulate_deployment(const DeploymentRequest& d, const topo::Topology& t);

}  // namespace charm::sim
