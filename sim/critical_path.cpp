// The critical path of a simulated plan, and when each Send/Recv's transfer began.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "scheduler/ir/plan_index.hpp"

#include "sim/engine.hpp"

namespace charm::sim {

using namespace charm::ir;

namespace {
/// When the transfer of Send/Recv `id` with `partner` began: a flow starts the moment its second side is issued.
Seconds transfer_start(const SimResult& r, OpId id, OpId partner) {
  return std::max(r.start_s[std::size_t(id)], r.start_s[std::size_t(partner)]);
}
}  // namespace

std::vector<Seconds> flow_start_times(const Plan& plan, const SimResult& r) {
  std::vector<Seconds> at(r.start_s);
  const PlanIndex idx(plan, nullptr, PlanIndex::Parts::Lean);  // partners are all it reads
  for (std::size_t i = 0; i < at.size(); ++i)
    if (const OpId p = idx.partner(OpId(i)); is_comm(plan.op(OpId(i))) && p != kNone)
      at[i] = transfer_start(r, OpId(i), p);
  return at;
}

namespace detail {

void Engine::critical_path() {
  // Walk back from the op that ends last: at each op, the predecessor is the
  // input that arrived last — a dependency, the previous op of its stream, or,
  // for a send/recv whose partner was issued later, the partner.
  const std::size_t n = plan_.size();
  if (n == 0) return;
  OpId cur = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (res_.end_s[i] > res_.end_s[std::size_t(cur)]) cur = OpId(i);
  std::vector<OpId> path;
  constexpr double kTol = 1e-12;
  while (cur != kNone && path.size() < n) {
    path.push_back(cur);
    if (is_comm(plan_.op(cur))) {
      const OpId p = idx_->partner(cur);
      if (res_.start_s[std::size_t(p)] > res_.start_s[std::size_t(cur)] + kTol) {
        cur = p;
        path.push_back(cur);
      }
    }
    const double start = res_.start_s[std::size_t(cur)];
    OpId best = kNone;
    double best_end = -1;
    auto consider = [&](OpId c) {
      const double e = res_.end_s[std::size_t(c)];
      if (e <= start + kTol && e > best_end) {
        best_end = e;
        best = c;
      }
    };
    // The issue group of cur, then the op before the group on its stream. A lane's ops are in id order:
    // cur's place is found by bisection, its group by the ops that join the one before (a lean index).
    const std::size_t lane = PlanIndex::lane(plan_.op(cur));
    const std::uint32_t lb = idx_->lane_begin(lane), le = idx_->lane_end(lane);
    const auto order = idx_->stream_order();
    auto gb = std::uint32_t(std::lower_bound(order.begin() + lb, order.begin() + le, cur) - order.begin());
    while (gb > lb && PlanIndex::joins_group(plan_.op(idx_->at(gb - 1)), plan_.op(idx_->at(gb)))) --gb;
    for (std::uint32_t k = gb, ge = group_end_from(gb, le); k < ge; ++k)
      for (OpId d : plan_.deps(idx_->at(k))) consider(d);
    if (gb > lb) consider(idx_->at(gb - 1));
    if (start <= kTol && best_end <= kTol) break;
    cur = best;
  }
  std::reverse(path.begin(), path.end());
  res_.critical_flow_start_s.resize(path.size());
  for (std::size_t k = 0; k < path.size(); ++k) {
    const auto i = std::size_t(path[k]);
    res_.critical_flow_start_s[k] =
        is_comm(plan_.op(path[k])) ? transfer_start(res_, path[k], idx_->partner(path[k])) : res_.start_s[i];
  }
  res_.critical_path = std::move(path);
}

}  // namespace detail

}  // namespace charm::sim
