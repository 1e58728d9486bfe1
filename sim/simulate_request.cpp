#include "sim/simulate_request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "sim/simulator.hpp"

namespace charm::sim {

namespace {
/// An error of the simulation, not of the request.
Error run_failed(Error e) {
  e.kind = ErrorKind::RunFailed;
  return e;
}
}  // namespace

Expected<std::optional<ChunkSolution>> solve_chunks(sched::PlanRequest& req, const topo::Topology& t,
                                                    const ChunkSolveOptions& solve, const sched::MemoryBudget& budget) {
  req = sched::normalised(std::move(req));
  if (req.workload.layout != ir::Layout::Balanced || !req.workload.chunk_map.empty())
    return std::optional<ChunkSolution>();
  if (req.ranks > t.num_gpus())
    return Error{Field::Ranks, fmt::format("{} ranks: {} has {} GPUs", req.ranks, t.name, t.num_gpus())};
  // Each candidate is planned and simulated in full: the budget holds one simulation, and as many at once as fit.
  if (auto s = budget.fits_plan(req, sched::kSimBytesPerOp, "each of the chunk solver's simulations"); !s)
    return s.error();
  ChunkSolveOptions options = solve;
  const double one = sched::simulation_bytes(sched::estimate_plan(req));
  if (one > 0 && budget.bytes / one < double(options.jobs)) options.jobs = std::max(1, int(budget.bytes / one));
  auto s = solve_chunk_map(req, t, options);
  if (!s) {
    Error e = s.error();
    e.kind = ErrorKind::Input;  // no chunk map of this request plans and simulates
    return e;
  }
  req.workload.chunk_map = s->chunk_map;
  return std::optional<ChunkSolution>(std::move(s).value());
}

Expected<Evaluation> simulate_request(const SimulationRequest& r, const topo::Topology& t) {
  const sched::RunTarget target = run_target(t, r.plan.workload.dtype);
  // TP's rings are routed before the plan is made, their one refusal (a layout larger than t) returned after
  // the planner's.
  std::optional<Expected<TpBlock>> tp_block;
  if (r.layout && r.attention_block) tp_block = lower_tp_block(r.plan.workload, *r.layout, t);
  auto plan = sched::plan_run(r, target, [&](std::size_t built, double estimated) {
    if (r.progress) r.progress(RunProgress{RunProgress::Stage::Planning, built, estimated});
  });
  if (!plan) return plan.error();
  LoweredRun run{std::move(plan).value(), {}};
  if (tp_block) {
    if (!*tp_block) return tp_block->error();
    run.tp_block = std::move(*tp_block).value();
  }
  SimOptions options;
  if (r.progress) {
    // The simulator indexes the plan before its first op runs (seconds at a few million ops).
    r.progress(RunProgress{RunProgress::Stage::Indexing, 0, double(run.plan.size())});
    options.progress = [&](std::size_t done, std::size_t total) {
      r.progress(RunProgress{RunProgress::Stage::Simulating, done, double(total)});
    };
  }
  auto e = evaluate_lowered(std::move(run), t, options);
  if (!e) return run_failed(e.error());
  return e;
}

}  // namespace charm::sim
