#pragma once
// Running a whole plan: the watchdog loop over a process's rank executors,
// input feeding from the global tensors, result assembly, and the threads
// backend (every rank in this process over a ThreadTransport).

#include <span>
#include <string>

#include "runtime/global_tensors.hpp"
#include "runtime/rank_executor.hpp"
#include "scheduler/trace/trace.hpp"

namespace charm::rt {

struct RunOptions {
  double timeout_s = 0;  // watchdog: give up after this long without progress; 0 = never
  bool timeline = false; // record every op's start and end (RunResult::timeline)
};

struct RunResult {
  GlobalTensors out;         // out/lse and/or dq/dk/dv, as the pass produces them
  double time_ms = 0;        // wall time of the plan itself
  std::size_t peak_bytes = 0;  // largest per-rank buffer high-water mark
  trace::Timeline timeline;    // with RunOptions::timeline: measured, seconds from the plan's start (MPI: on rank 0)
};

/// Fills Input buffers of `plan` from the global tensors (Q, KV, dO; O and LSE for a backward-only plan).
[[nodiscard]] BufferStore::FillInput input_filler(const ir::Plan& plan, const GlobalTensors& in);

/// Starts the executors and waits until all finish (ok), one fails, or none
/// progresses for opt.timeout_s. A stall is an error whose message names the
/// rank and the op it waits on; every worker has stopped when this returns.
[[nodiscard]] Status drive(std::span<RankExecutor* const> execs, const ir::Plan& plan, const RunOptions& opt);

/// Writes a rank's shard results into the global tensors (sized here on first use).
void assemble(const ir::Plan& plan, ir::RankId rank, const RankOutputs& shard, GlobalTensors& global);

/// Backend `threads`: runs every rank of `plan` in this process.
[[nodiscard]] Expected<RunResult> run_threads(const ir::Plan& plan, const GlobalTensors& in, const RunOptions& opt);

/// Builds the inputs a plan needs from `seed`: q, k, v, dout, plus out/lse from the
/// fp64 reference when the plan is backward-only (it expects the forward results as inputs).
[[nodiscard]] GlobalTensors plan_inputs(const ir::Workload& w, std::uint64_t seed);

} // namespace charm::rt
