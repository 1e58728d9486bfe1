#include "scheduler/trace/summary.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace charm::trace {

double union_length(std::vector<std::pair<double, double>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0, cur_s = 0, cur_e = 0;
  bool have = false;
  for (const auto& [s, e] : iv) {
    if (!(e > s)) continue;
    if (have && s <= cur_e) {
      cur_e = std::max(cur_e, e);
      continue;
    }
    if (have) total += cur_e - cur_s;
    cur_s = s;
    cur_e = e;
    have = true;
  }
  if (have) total += cur_e - cur_s;
  return total;
}

RunSummary summarize(const ir::Plan& plan, const Timeline& t) {
  RunSummary s;
  const std::size_t n = std::size_t(plan.ranks);
  if (n == 0) return s;
  using Iv = std::vector<std::pair<double, double>>;
  std::vector<Iv> compute(n), comm(n);
  std::vector<std::vector<Iv>> by_stream(n, std::vector<Iv>(ir::kNumStreams));
  std::vector<double> rank_end(n, 0.0);
  const std::size_t ops = std::min({plan.size(), t.start_s.size(), t.end_s.size()});
  for (std::size_t i = 0; i < ops; ++i) {
    const auto& op = plan.op(ir::OpId(i));
    const auto r = std::size_t(op.rank);
    const std::pair<double, double> iv{t.start_s[i], t.end_s[i]};
    if (r >= n || !(iv.second >= iv.first)) continue;  // NaN: not measured
    by_stream[r][std::size_t(op.stream)].push_back(iv);
    if (op.stream == ir::Stream::Compute) compute[r].push_back(iv);
    if (ir::is_comm(op)) comm[r].push_back(iv);
    rank_end[r] = std::max(rank_end[r], iv.second);
    s.time_s = std::max(s.time_s, iv.second);
  }
  std::vector<double> exposed(n, 0.0);
  for (std::size_t r = 0; r < n; ++r) {
    const double busy = union_length(compute[r]);
    Iv both = compute[r];
    both.insert(both.end(), comm[r].begin(), comm[r].end());
    exposed[r] = union_length(both) - busy;  // comm time not covered by compute
    const double idle = s.time_s - busy;
    s.compute_busy_mean_s += busy / double(n);
    s.comm_busy_mean_s += union_length(comm[r]) / double(n);
    s.exposed_comm_mean_s += exposed[r] / double(n);
    s.exposed_comm_max_s = std::max(s.exposed_comm_max_s, exposed[r]);
    s.idle_mean_s += idle / double(n);
    s.idle_max_s = std::max(s.idle_max_s, idle);
    for (int k = 0; k < ir::kNumStreams; ++k)
      s.stream_busy_mean_s[k] += union_length(by_stream[r][std::size_t(k)]) / double(n);
    if (rank_end[r] > rank_end[std::size_t(s.last_rank)]) s.last_rank = int(r);
  }
  s.exposed_comm_s = exposed[std::size_t(s.last_rank)];
  return s;
}

nlohmann::json summary_json(const RunSummary& s) {
  nlohmann::json streams = nlohmann::json::object();
  for (int k = 0; k < ir::kNumStreams; ++k)
    streams[std::string(ir::to_string(ir::Stream(k)))] = s.stream_busy_mean_s[k] * 1e3;
  return {{"exposed_comm_ms", s.exposed_comm_s * 1e3},
          {"exposed_comm_per_rank_ms", {{"mean", s.exposed_comm_mean_s * 1e3}, {"max", s.exposed_comm_max_s * 1e3}}},
          {"idle_ms", {{"mean", s.idle_mean_s * 1e3}, {"max", s.idle_max_s * 1e3}}},
          {"compute_busy_ms", {{"mean", s.compute_busy_mean_s * 1e3}}},
          {"comm_busy_ms", {{"mean", s.comm_busy_mean_s * 1e3}}},
          {"stream_busy_ms", streams}};
}

std::string summary_text(const RunSummary& s) {
  return fmt::format("# exposed comm {:.3f} ms (per rank mean {:.3f}, max {:.3f}), compute busy {:.3f} ms (mean), "
                     "transfers in flight {:.3f} ms (mean)\n",
                     s.exposed_comm_s * 1e3, s.exposed_comm_mean_s * 1e3, s.exposed_comm_max_s * 1e3,
                     s.compute_busy_mean_s * 1e3, s.comm_busy_mean_s * 1e3);
}

}  // namespace charm::trace
