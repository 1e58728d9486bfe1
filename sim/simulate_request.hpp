#pragma once
// One algorithm on one topology as `charm simulate` runs it, from the request to the evaluation, each stage
// once (simulate_request, the one entry for a group or a deployment). The command line and the Python module
// call it through tools/run_one.hpp; nothing here reads flags or prints.

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
  enum class Stage { SolvingChunks, Planning, Indexing, Simulating };
  Stage stage = Stage::Planning;
  std::size_t done = 0;  // chunk maps tried (SolvingChunks), ops planned (Planning) or simulated (Simulating)
  double total = 0;      // the most chunk maps there will be; ops: the estimate while planning, the plan's after
};

/// One simulation as `charm simulate`, `charm compare` and the Python module ask for it: one group of ranks on
/// `t`'s first GPUs (or on `gpus`), or every CP group of a deployment's `layout` at once. A balanced layout's
/// chunk map is solved before (solve_chunks): the request carries it in its workload.
struct SimulationRequest {
  sched::PlanRequest plan;  // the algorithm, the workload (a deployment's: the whole model's), ranks, domains
  std::optional<sched::Layout> layout;  // a deployment's CP x TP layout: layout.cp ranks a group (plan.ranks unused)
  bool attention_block = false;    // a deployment's whole attention blocks (TP's collectives and GEMMs; --tp given)
  std::vector<std::int32_t> gpus;  // one group: rank r on GPU gpus[r] (placed by hand: rank by rank); empty: GPU r
  SymmetryUse symmetry = SymmetryUse::Auto;
  sched::MemoryBudget budget;
  std::function<void(const RunProgress&)> progress;  // told now and then on the caller's thread; may be empty
};

/// The quotient to simulate `req` by on `t` (checked against its plan: sched::Quotient::of), if `use` and the
/// symmetries allow one; an error of --symmetry where `use` is On and none does.
[[nodiscard]] Expected<sched::Quotient> quotient_for(const sched::CheckedRequest& req, const topo::Topology& t,
                                                     SymmetryUse use);

/// The stage before simulate_request for one group: `req`'s chunk map solved on `t` where its layout is balanced
/// and it has none (`req` normalised first, as the planner runs it); the solution, or nothing where there was
/// nothing to solve. Errors are the request's (ErrorKind::Input).
[[nodiscard]] Expected<std::optional<ChunkSolution>> solve_chunks(sched::PlanRequest& req, const topo::Topology& t,
                                                                  const ChunkSolveOptions& solve,
                                                                  const sched::MemoryBudget& budget);

/// The one entry, its stages in order, each once, the same for one group and a deployment: the run's CP group
/// checked (sched::CheckedRequest; a deployment's group first takes TP's share of the heads,
/// sched::group_workload, whose refusal is --tp's; a balanced layout without its chunk map is refused there);
/// the ranks the simulation keeps chosen (one group's rank symmetry, or the whole CP groups that stand for the
/// others where the layout's rotation is one the topology has); their memory judged by the budget; the run
/// lowered (LoweredRun: the plan built, a deployment's group placed as the groups kept, TP's rings routed where
/// whole attention blocks are asked for); and the lowered run simulated (evaluate_lowered).
/// A refusal of the request (the checker's, the symmetry's, the memory budget's, the planner's) is returned as
/// it came; a simulation that fails is ErrorKind::RunFailed.
[[nodiscard]] Expected<Evaluation> simulate_request(const SimulationRequest& r, const topo::Topology& t);

}  // namespace charm::sim
