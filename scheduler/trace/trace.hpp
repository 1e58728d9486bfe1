#pragma once
// charm::trace — what happened to each op of a plan, and the Chrome trace of it,
// for every producer alike: the simulator's predicted times, the CPU executors'
// measured ones (threads, MPI) and the GPU runner's. Depends on the IR only, so
// a measured trace and a predicted one have the same schema: same op ids (args.op),
// names, processes (ranks) and threads (streams), and can be laid side by side.

#include <nlohmann/json.hpp>

#include <atomic>
#include <span>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::trace {

/// Per op (indexed by OpId): when it was issued, when it completed, and for a
/// Send/Recv when its transfer started (both sides ready; a measured run that
/// cannot tell uses the issue time). Seconds from the run's start.
struct Timeline {
  std::vector<double> start_s, end_s, flow_start_s;
  double makespan_s = 0;

  /// One entry per op of `plan`, all zero.
  static Timeline zeros(const ir::Plan& plan);
  /// An op that never ran (a failed run) keeps start = end = 0.
  void record(ir::OpId id, double start, double end) {
    start_s[std::size_t(id)] = start;
    end_s[std::size_t(id)] = end;
    flow_start_s[std::size_t(id)] = start;
  }
};

/// Chrome trace: pid = rank, tid = stream, one "X" slice per op (microseconds) with
/// args.op = the op id, args.flops or args.bytes; "s"/"f" flow arrows send -> receive.
/// `other` is merged into otherData (algo, ranks and makespan_ms are always there).
[[nodiscard]] nlohmann::json chrome_trace(const ir::Plan& plan, std::span<const double> start_s,
                                          std::span<const double> end_s, std::span<const double> flow_start_s,
                                          double makespan_s, const nlohmann::json& other = nlohmann::json::object());
[[nodiscard]] inline nlohmann::json chrome_trace(const ir::Plan& plan, const Timeline& t,
                                                 const nlohmann::json& other = nlohmann::json::object()) {
  return chrome_trace(plan, t.start_s, t.end_s, t.flow_start_s, t.makespan_s, other);
}

}  // namespace charm::trace
