#pragma once
// Timeline: the simulator's summary numbers computed from measured op times,
// so that `charm run` (GPU) and `charm simulate` report the same quantities.
// Definitions follow sim/simulator.hpp: compute busy = time the compute stream
// runs an op; exposed communication = time a Send/Recv of the rank is in
// flight while its compute stream is idle; idle = makespan - compute busy;
// exposed_comm of the run = that of the rank that finishes last.
// Plain C++ (no CUDA): unit-tested on hand-made intervals.

#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::rt::cuda {

struct TimelineSummary {
  double time_ms = 0;          // makespan: last op end
  double exposed_comm_ms = 0;  // of the rank that finishes last
  double exposed_comm_mean_ms = 0, exposed_comm_max_ms = 0;
  double idle_mean_ms = 0, idle_max_ms = 0;
  double compute_busy_mean_ms = 0;
  double stream_busy_mean_ms[ir::kNumStreams] = {};  // per stream kind, mean over ranks
  int last_rank = 0;
};

/// Total length of the union of [start, end) intervals.
[[nodiscard]] double union_length(std::vector<std::pair<double, double>> intervals);

/// Summary of a run whose op i ran over [start_ms[i], end_ms[i]) (times from one origin).
[[nodiscard]] TimelineSummary summarize_timeline(const ir::Plan& plan, const std::vector<double>& start_ms,
                                                 const std::vector<double>& end_ms);

}  // namespace charm::rt::cuda
