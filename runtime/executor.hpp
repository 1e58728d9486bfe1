#pragma once
// Running a whole plan: the watchdog loop over a process's rank executors,
// input feeding from the global tensors, result assembly, and the threads
// backend (every rank in this process over a ThreadTransport).

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "runtime/faults.hpp"
#include "runtime/global_tensors.hpp"
#include "runtime/rank_executor.hpp"
#include "scheduler/ir/validated_plan.hpp"
#include "scheduler/trace/trace.hpp"

namespace charm::rt {

/// The state of a job of several processes, summed over them (backend mpi's heartbeat).
struct JobState {
  std::uint64_t progress = 0;  // ops completed, plus watchdog ticks spent inside a running op
  std::uint64_t done = 0;      // processes with every op finished (or failed)
  std::uint64_t failed = 0;    // processes with a failed op
};

/// How drive() hears about the other processes of a job.
class JobMonitor {
 public:
  virtual ~JobMonitor() = default;
  /// Never blocks: hands in this process's state; returns the job's once a round of the
  /// exchange completed (nullopt while one is in flight). A round is never left in flight
  /// by a result that ends the run (every process done, or one failed).
  [[nodiscard]] virtual Expected<std::optional<JobState>> poll(const JobState& mine) = 0;
  /// The number of processes (JobState::done reaches it when every one is done).
  [[nodiscard]] virtual std::uint64_t processes() const = 0;
  /// Seconds the round in flight has waited for the others (0 when none is in flight).
  [[nodiscard]] virtual double waiting_s() const = 0;
};

struct RunOptions {
  double timeout_s = 0;           // watchdog: give up after this long without progress; 0 = never
  bool timeline = false;          // record every op's start and end (RunResult::timeline)
  Faults faults{};                // testing: what to break on purpose (none by default)
  JobMonitor* monitor = nullptr;  // set by backend mpi: progress anywhere in the job is progress
};

struct RunResult {
  GlobalTensors out;           // out/lse and/or dq/dk/dv, as the pass produces them
  double time_ms = 0;          // wall time of the plan itself
  std::size_t peak_bytes = 0;  // largest per-rank buffer high-water mark
  trace::Timeline timeline;    // with RunOptions::timeline: measured, seconds from the plan's start (MPI: on rank 0)
};

/// Fills Input buffers of `plan` from the global tensors (Q, KV, dO; O and LSE for a backward-only plan).
[[nodiscard]] BufferStore::FillInput input_filler(const ir::Plan& plan, const GlobalTensors& in);

/// Starts the executors and waits until all finish (ok), one fails, or none
/// progresses for opt.timeout_s. A stall is an error whose message names the
/// rank and the op it waits on; every worker has stopped when this returns.
[[nodiscard]] Status drive(std::span<RankExecutor* const> execs, const ir::Plan& plan, const RunOptions& opt);

/// Outcome of drive() with a JobMonitor: whether every process of the job saw the failure
/// (some process reported failed, and every one left the run in the same round).
struct DriveOutcome {
  Status status;
  bool agreed = false;
};
/// drive() for one process of a job: ends when the job is done or failed, a stall being
/// no progress anywhere in the job for opt.timeout_s (opt.monitor must be set).
[[nodiscard]] DriveOutcome drive_job(std::span<RankExecutor* const> execs, const ir::Plan& plan, const RunOptions& opt);

/// A digest of everything in the plan that the executors read (workload, ops, deps,
/// buffers, results): processes of one job compare it before they run.
[[nodiscard]] std::uint64_t plan_fingerprint(const ir::Plan& plan);

/// Writes a rank's shard results into the global tensors (sized here on first use).
void assemble(const ir::Plan& plan, ir::RankId rank, const RankOutputs& shard, GlobalTensors& global);

/// Backend `threads`: runs every rank of `plan` in this process (a copy broken by opt.faults where they drop ops).
[[nodiscard]] Expected<RunResult> run_threads(const ir::ValidatedPlan& plan, const GlobalTensors& in,
                                              const RunOptions& opt);
/// run_threads on a plan nobody proved: for the tests of the executor's own defences, which must name a broken
/// plan's fault as an error, never crash. Everything else runs a ValidatedPlan.
[[nodiscard]] Expected<RunResult> run_threads_unvalidated(const ir::Plan& plan, const GlobalTensors& in,
                                                          const RunOptions& opt);

/// Builds the inputs a plan needs from `seed`: q, k, v, dout (where a backward pass reads it), plus out/lse from the
/// fp64 reference when the plan is backward-only (it expects the forward results as inputs).
[[nodiscard]] GlobalTensors plan_inputs(const ir::Workload& w, std::uint64_t seed);

}  // namespace charm::rt
