#include "sim/report.hpp"

#include "scheduler/trace/trace.hpp"
#include "sim/fair_share_network.hpp"

#include <algorithm>

namespace charm::sim {

using namespace charm::ir;

Summary summarize(const SimResult& r) {
  Summary s;
  s.time_s = r.makespan_s;
  if (r.ranks.empty()) return s;
  s.exposed_comm_s = r.ranks[std::size_t(r.last_rank)].exposed_comm_s;
  for (const auto& rk : r.ranks) {
    s.exposed_comm_mean_s += rk.exposed_comm_s;
    s.exposed_comm_max_s = std::max(s.exposed_comm_max_s, rk.exposed_comm_s);
    s.idle_mean_s += rk.idle_s;
    s.idle_max_s = std::max(s.idle_max_s, rk.idle_s);
    s.busy_mean_s += rk.compute_busy_s;
    s.comm_busy_mean_s += rk.comm_busy_s;
    s.peak_mem_bytes = std::max(s.peak_mem_bytes, rk.peak_mem_bytes);
  }
  const double n = double(r.ranks.size());
  s.exposed_comm_mean_s /= n;
  s.idle_mean_s /= n;
  s.busy_mean_s /= n;
  s.comm_busy_mean_s /= n;
  return s;
}

nlohmann::json critical_path_json(const Plan& plan, const SimResult& r, std::size_t limit) {
  nlohmann::json a = nlohmann::json::array();
  const auto& p = r.critical_path;
  std::vector<OpId> keep(p.begin(), p.end());
  if (keep.size() > limit) {
    // Keep the `limit` longest ops, in path order.
    std::vector<OpId> by_len = keep;
    std::stable_sort(by_len.begin(), by_len.end(), [&](OpId x, OpId y) {
      return r.end_s[std::size_t(x)] - r.start_s[std::size_t(x)] > r.end_s[std::size_t(y)] - r.start_s[std::size_t(y)];
    });
    by_len.resize(limit);
    std::sort(by_len.begin(), by_len.end(),
              [&](OpId x, OpId y) { return std::find(p.begin(), p.end(), x) < std::find(p.begin(), p.end(), y); });
    keep = by_len;
  }
  for (OpId id : keep) {
    const Op& o = plan.op(id);
    a.push_back({{"op", id},
                 {"rank", o.rank},
                 {"stream", std::string(to_string(o.stream))},
                 {"label", op_label(plan, id)},
                 {"start_ms", r.start_s[std::size_t(id)] * 1e3},
                 {"end_ms", r.end_s[std::size_t(id)] * 1e3}});
  }
  return a;
}

nlohmann::json links_json(const topo::Topology& t, const SimResult& r) {
  nlohmann::json a = nlohmann::json::array();
  for (std::size_t c = 0; c < r.channels.size(); ++c) {
    const auto& s = r.channels[c];
    if (s.bytes <= 0) continue;
    const auto& l = t.channel_link(int(c));
    const double avg_gbps = r.makespan_s > 0 ? s.bytes / r.makespan_s / 1e9 : 0;
    // What the channel can carry at once in the model: a shared channel its capacity (the injection limit where
    // one is set); a dedicated one gives every flow its full rate, so at most its most flows at once times that.
    const auto ch = FairShareNetwork::channel_of(l);
    const double capacity_gbps =
        (ch.shared ? ch.capacity_bytes_per_s
                   : std::min(ch.capacity_bytes_per_s, ch.flow_cap_bytes_per_s) * std::max(1, s.max_flows)) /
        1e9;
    a.push_back({{"link", t.channel_name(int(c))},
                 {"sharing", l.sharing == topo::Sharing::Shared ? "shared" : "dedicated"},
                 {"bandwidth_gbps", l.bandwidth_gbps},
                 {"bytes", s.bytes},
                 {"busy_ms", s.busy_s * 1e3},
                 {"busy_fraction", r.makespan_s > 0 ? s.busy_s / r.makespan_s : 0},
                 {"avg_gbps", avg_gbps},
                 {"capacity_gbps", capacity_gbps},
                 {"utilisation", capacity_gbps > 0 ? std::min(1.0, avg_gbps / capacity_gbps) : 0.0},
                 {"max_flows", s.max_flows}});
  }
  return a;
}

nlohmann::json chrome_trace(const Plan& plan, const SimResult& r) {
  return trace::chrome_trace(plan, r.start_s, r.end_s, flow_start_times(plan, r), r.makespan_s);
}

}  // namespace charm::sim
