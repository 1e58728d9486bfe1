// The rank symmetry of an algorithm's plan for a request (sched::plan_symmetry), and the quotients that
// coarsen it (sched::Quotient::of).

#include "scheduler/planners/plan_symmetry.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "scheduler/planners/algorithms.hpp"

namespace charm::sched {

using namespace charm::ir;

int document_period(const ir::Workload& w, int ranks) {
  if (w.documents.empty() || w.window > 0 || w.layout != Layout::Contiguous || ranks < 1 || w.seq % ranks != 0)
    return 0;
  const std::int64_t len = w.documents.front();
  if (std::any_of(w.documents.begin(), w.documents.end(), [&](std::int64_t d) { return d != len; })) return 0;
  const std::int64_t k = len / std::gcd(len, w.shard_tokens(ranks));  // shards in the shortest whole-document run
  return ranks % k == 0 ? int(k) : 0;
}

namespace {
/// The algorithm's symmetry for the request without its mask (a full one).
RankSymmetry unmasked_symmetry(const CheckedRequest& checked) {
  PlanRequest full = checked.get();
  full.workload.causal = false;
  full.workload.documents.clear();
  return checked.algorithm().symmetry(full);
}

/// The unmasked symmetry coarsened to a multiple of `period` ranks.
RankSymmetry with_period(const CheckedRequest& checked, int period) {
  RankSymmetry s = unmasked_symmetry(checked);
  if (!s.active()) return {};
  if (s.kind == RankSymmetry::Kind::Rotate) {
    s.block = std::lcm(s.block, period);
    return s;
  }
  // Xor by a multiple of a power-of-two period maps runs of `period` ranks onto such runs.
  if ((period & (period - 1)) != 0) return {};
  s.block = std::max(s.block, period);
  return s;
}
}  // namespace

RankSymmetry plan_symmetry(const PlanRequest& req, bool zigzag_halves_alike) {
  const auto checked = CheckedRequest::check(req);
  return checked ? plan_symmetry(*checked, zigzag_halves_alike) : RankSymmetry{};
}

RankSymmetry plan_symmetry(const CheckedRequest& checked, bool zigzag_halves_alike) {
  const PlanRequest& req = checked.get();
  const Algorithm& a = checked.algorithm();
  const int n = req.ranks;
  const ir::Workload& w = req.workload;
  RankSymmetry s;
  if (!w.position_mask())
    s = a.symmetry(req);
  else if (const int period = document_period(w, n); period > 0)
    s = with_period(checked, period);  // documents of one length repeat; other documents and windows do not
  // The pieces are all the mask changes, but for TASP, whose token parts cut a half block unevenly.
  if (!s.active() && zigzag_halves_alike && w.causal && !w.position_mask() && w.layout == Layout::Zigzag &&
      !a.token_parts) {
    s = unmasked_symmetry(checked);  // by cost
    s.zigzag_halves_alike = s.active();
  }
  return s.active() && s.block < n && check_symmetry_shape(s, n).ok() ? s : RankSymmetry{};
}

Expected<Quotient> Quotient::of(const CheckedRequest& checked, RankSymmetry s) {
  if (!s.active()) return Quotient{};
  const PlanRequest& req = checked.get();
  if (auto st = check_symmetry_shape(s, req.ranks); !st) return st.error();
  const RankSymmetry plan = plan_symmetry(checked, s.zigzag_halves_alike);
  if (!plan.active())
    return Error{"symmetry",
                 fmt::format("{}'s plan for this request has no rank symmetry to take a quotient by", req.algo)};
  if (s.kind != plan.kind || s.block % plan.block != 0)
    return Error{"symmetry", fmt::format("{} symmetry in blocks of {} does not coarsen the plan's, {} in blocks of {}",
                                         to_string(s.kind), s.block, to_string(plan.kind), plan.block)};
  s.heads_are_labels = plan.heads_are_labels;
  s.zigzag_halves_alike = plan.zigzag_halves_alike;
  return Quotient(s);
}

}  // namespace charm::sched
