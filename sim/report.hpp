#pragma once
// Reports of a simulation: a JSON summary and a Chrome trace (Perfetto).

#include <nlohmann/json.hpp>
#include <string>

#include "scheduler/ir/plan.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

struct Summary {
  Seconds time_s = 0;
  Seconds exposed_comm_s = 0;  // of the rank that finishes last (SimResult::last_rank: ties go to the lowest)
  Seconds exposed_comm_mean_s = 0, exposed_comm_max_s = 0;
  Seconds idle_mean_s = 0, idle_max_s = 0;
  Seconds busy_mean_s = 0;
  Seconds comm_busy_mean_s = 0;  // mean time with a send/recv outstanding
  ir::Bytes peak_mem_bytes = 0;  // max over ranks
};
[[nodiscard]] Summary summarize(const SimResult& r);

/// The "critical_path" array: one entry per op of the chain (at most `limit`, the longest ones kept in order).
[[nodiscard]] nlohmann::json critical_path_json(const ir::Plan& plan, const SimResult& r, std::size_t limit = 64);
/// The channels that carried traffic: bytes, busy time, avg_gbps (bytes / makespan) and `utilisation`, a share in
/// [0, 1]: avg_gbps / capacity_gbps, what the channel carries at once in the model (a shared channel its capacity or
/// injection limit; a dedicated one its per-flow rate times the most flows it carried at once).
[[nodiscard]] nlohmann::json links_json(const topo::Topology& t, const SimResult& r);
/// Chrome trace: pid = rank, tid = stream, "X" slices in microseconds, "s"/"f" flow arrows send -> recv.
[[nodiscard]] nlohmann::json chrome_trace(const ir::Plan& plan, const SimResult& r);

}  // namespace charm::sim
