#pragma once
// One algorithm on one topology as `charm simulate` runs it, from the request to the evaluation, each stage
// once (simulate_request, the one entry for a group or a deployment). The command line and the Python module
// call it through tools/run_one.hpp; nothing here reads flags or prints.

#include <cstddef>
#include <functional>
#include <optional>

#include "scheduler/planners/estimate.hpp"
#include "scheduler/planners/planned_run.hpp"
#include "scheduler/planners/request.hpp"
#include "sim/chunk_solver.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

/// How far a run has got, for a progress line.
struct RunProgress {
  enum class Stage { SolvingChunks, Planning, Indexing, Simulating };
  Stage stage = Stage::Planning;
  std::size_t done = 0;  // chunk maps tried (SolvingChunks), ops planned (Planning) or simulated (Simulating)
  double total = 0;      // the most chunk maps there will be; ops: the estimate while planning, the plan's after
};

/// One simulation as `charm simulate`, `charm compare` and the Python module ask for it: the run (its plan,
/// layout, GPUs, use of symmetry and memory budget: sched::RunRequest), and what the simulator adds.
struct SimulationRequest : sched::RunRequest {
  bool attention_block = false;  // a deployment's whole attention blocks (TP's collectives and GEMMs; --tp given)
  std::function<void(const RunProgress&)> progress;  // told now and then on the caller's thread; may be empty
};

/// The stage before simulate_request for one group: `req`'s chunk map solved on `t` where its layout is balanced
/// and it has none (`req` normalised first, as the planner runs it); the solution, or nothing where there was
/// nothing to solve. Errors are the request's (ErrorKind::Input). It simulates `solve.jobs` candidates at once, or
/// as many as `budget` holds simulations of `req`.
[[nodiscard]] Expected<std::optional<ChunkSolution>> solve_chunks(sched::PlanRequest& req, const topo::Topology& t,
                                                                  const ChunkSolveOptions& solve,
                                                                  const sched::MemoryBudget& budget);

/// The one entry, the same for one group and a deployment, in three steps: what `t` offers the run
/// (run_target: its GPU's pricing of the zigzag halves, its blocks); the run planned (sched::plan_run: the CP
/// group checked, the ranks the simulation keeps chosen, their memory judged, the plan built and placed); and
/// the plan simulated (evaluate_lowered), with TP's rings routed on `t` where whole attention blocks are asked
/// for (lower_tp_block).
/// A refusal of the request (the checker's, the symmetry's, the memory budget's, the planner's, then --tp's for
/// a layout larger than `t`) is returned as it came; a simulation that fails is ErrorKind::RunFailed.
[[nodiscard]] Expected<Evaluation> simulate_request(const SimulationRequest& r, const topo::Topology& t);

}  // namespace charm::sim
