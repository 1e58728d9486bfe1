#include "runtime/cuda/timeline.hpp"

#include <algorithm>

namespace charm::rt::cuda {

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

TimelineSummary summarize_timeline(const ir::Plan& plan, const std::vector<double>& start_ms,
                                   const std::vector<double>& end_ms) {
  TimelineSummary s;
  const std::size_t n = std::size_t(plan.ranks);
  if (n == 0) return s;
  using Iv = std::vector<std::pair<double, double>>;
  std::vector<Iv> compute(n), comm(n);
  std::vector<std::vector<Iv>> by_stream(n, std::vector<Iv>(ir::kNumStreams));
  std::vector<double> rank_end(n, 0.0);
  for (std::size_t i = 0; i < plan.size() && i < start_ms.size() && i < end_ms.size(); ++i) {
    const auto& op = plan.op(ir::OpId(i));
    const auto r = std::size_t(op.rank);
    const std::pair<double, double> iv{start_ms[i], end_ms[i]};
    if (r >= n || !(iv.second >= iv.first)) continue;  // NaN: not measured
    by_stream[r][int(op.stream)].push_back(iv);
    if (op.stream == ir::Stream::Compute) compute[r].push_back(iv);
    if (op.kind == ir::OpKind::Send || op.kind == ir::OpKind::Recv) comm[r].push_back(iv);
    rank_end[r] = std::max(rank_end[r], iv.second);
    s.time_ms = std::max(s.time_ms, iv.second);
  }
  for (std::size_t r = 0; r < n; ++r) {
    const double busy = union_length(compute[r]);
    Iv both = compute[r];
    both.insert(both.end(), comm[r].begin(), comm[r].end());
    const double exposed = union_length(both) - busy;  // comm time not covered by compute
    const double idle = s.time_ms - busy;
    s.compute_busy_mean_ms += busy / double(n);
    s.exposed_comm_mean_ms += exposed / double(n);
    s.exposed_comm_max_ms = std::max(s.exposed_comm_max_ms, exposed);
    s.idle_mean_ms += idle / double(n);
    s.idle_max_ms = std::max(s.idle_max_ms, idle);
    for (int k = 0; k < ir::kNumStreams; ++k)
      s.stream_busy_mean_ms[k] += union_length(by_stream[r][std::size_t(k)]) / double(n);
    if (rank_end[r] > rank_end[std::size_t(s.last_rank)]) s.last_rank = int(r);
  }
  Iv both = compute[std::size_t(s.last_rank)];
  both.insert(both.end(), comm[std::size_t(s.last_rank)].begin(), comm[std::size_t(s.last_rank)].end());
  s.exposed_comm_ms = union_length(both) - union_length(compute[std::size_t(s.last_rank)]);
  return s;
}

}  // namespace charm::rt::cuda
