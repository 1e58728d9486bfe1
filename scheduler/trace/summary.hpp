#pragma once
// The run summary of a measured timeline: the simulator's figures (sim/report.hpp Summary, with the
// definitions of sim/simulator.hpp) computed from op intervals, so that `charm run` on every backend
// (threads, mpi, cuda-local, cuda) reports what `charm simulate` does, with the same JSON names:
//   compute busy          time the rank's compute stream runs an op
//   comm busy             time the rank has a Send/Recv in flight
//   exposed communication comm busy outside compute busy; the run's = that of the rank that ends last
//   idle                  makespan - compute busy

#include <nlohmann/json.hpp>

#include <string>
#include <utility>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/trace/trace.hpp"

namespace charm::trace {

struct RunSummary {
  double time_s = 0;  // the last op's end
  double exposed_comm_s = 0;
  double exposed_comm_mean_s = 0, exposed_comm_max_s = 0;
  double idle_mean_s = 0, idle_max_s = 0;
  double compute_busy_mean_s = 0, comm_busy_mean_s = 0;
  double stream_busy_mean_s[ir::kNumStreams] = {};  // per stream kind, mean over ranks
  int last_rank = 0;                                // the rank that ends last (ties: the lowest)
};

/// Total length of the union of [start, end) intervals (empty and reversed ones count 0).
[[nodiscard]] double union_length(std::vector<std::pair<double, double>> intervals);

/// The summary of a timeline of `plan`; ops that were not measured (NaN, or end before start) are left out.
[[nodiscard]] RunSummary summarize(const ir::Plan& plan, const Timeline& t);

/// The summary's fields under `charm simulate --json`'s names (exposed_comm_ms, exposed_comm_per_rank_ms,
/// idle_ms, compute_busy_ms, comm_busy_ms) and stream_busy_ms per stream.
[[nodiscard]] nlohmann::json summary_json(const RunSummary& s);
/// One line: "# exposed comm 1.234 ms (per rank mean ..., max ...), compute busy ... ms (mean), comm busy ...".
[[nodiscard]] std::string summary_text(const RunSummary& s);

}  // namespace charm::trace
