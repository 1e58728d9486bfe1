// The pass driver: inputs per rank, the forward schedule, the backward bundle and the backward schedule,
// for every algorithm, of a checked request (request.cpp checks it, estimate.cpp sizes it, plan_symmetry.cpp
// finds what a quotient plan may be taken by).

#include "scheduler/planners/planners.hpp"

#include <algorithm>

#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/schedules.hpp"

namespace charm::sched {

using namespace charm::ir;

namespace {

void plan_forward(PlanBuilder& b, std::vector<detail::RankState>& st, const CheckedRequest& req) {
  b.set_phase(Phase::Fwd);
  req.algorithm().forward(b, st, req.get());
}

void plan_backward(PlanBuilder& b, std::vector<detail::RankState>& st, const CheckedRequest& req) {
  const Algorithm& a = req.algorithm();
  b.set_phase(Phase::Bwd);
  if (!a.packs_bundle) {
    for (std::size_t r = 0; r < st.size(); ++r) {
      const BufferId dout = b.buffer(RankId(r), BufKind::Dout, RankId(r), BufInit::Input);
      BufferId out = b.results(RankId(r)).out;
      if (req->workload.pass == PassKind::Bwd) {
        out = b.buffer(RankId(r), BufKind::Out, RankId(r), BufInit::Input);
        b.results(RankId(r)).out = out;
      }
      st[r].qbundle = b.buffer(RankId(r), BufKind::QBundle, RankId(r), BufInit::None);
      b.pack(st[r].q, dout, out, st[r].qbundle);
    }
  }
  a.backward(b, st, req.get());
}

/// The plan of a checked request, or its quotient under an active `quotient`.
Plan build_plan(const CheckedRequest& req, const Quotient& quotient, QuotientStats* stats,
                const PlanProgress& progress) {
  const int n = req->ranks;
  PlanBuilder b(req->algo, req->workload, n, req->domains, quotient);
  // Large plans get a little over the estimate up front: growing past it would copy every
  // op (half the planner's time at 512 ranks); small ones grow as they go.
  const double ops = quotient.active() ? estimate_quotient_plan(req, quotient.symmetry()).ops : req.estimate().ops;
  if (progress) b.on_progress([&progress, ops](std::size_t built) { progress(built, ops); });
  if (ops >= 65536) b.reserve(std::size_t(ops * 1.1));
  if (req.algorithm().token_parts) b.set_parts(std::max<int>(1, int(detail::tasp_cycle_steps(n).size())));
  std::vector<detail::RankState> st(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < st.size(); ++r) {
    st[r].q = b.buffer(RankId(r), BufKind::Q, RankId(r), BufInit::Input);
    st[r].kv = b.buffer(RankId(r), BufKind::Kv, RankId(r), BufInit::Input);
  }
  if (req->workload.pass != PassKind::Bwd) plan_forward(b, st, req);
  if (req->workload.pass != PassKind::Fwd) plan_backward(b, st, req);
  if (stats != nullptr) *stats = {b.phantoms().count(), b.phantoms().memory_bytes()};
  return std::move(b).finish();
}

}  // namespace

Expected<Plan> make_plan(const PlanRequest& req) {
  const auto checked = CheckedRequest::check(req);
  if (!checked) return checked.error();
  return build_plan(*checked, {}, nullptr, {});
}

Expected<Plan> make_plan(const PlanRequest& req, RankSymmetry quotient, QuotientStats* stats,
                         const PlanProgress& progress) {
  if (stats != nullptr) *stats = {};
  const auto checked = CheckedRequest::check(req);
  if (!checked) return checked.error();
  const auto q = Quotient::of(*checked, quotient);
  if (!q) return q.error();
  return make_plan(*checked, *q, stats, progress);
}

Expected<Plan> make_plan(const CheckedRequest& checked, const Quotient& quotient, QuotientStats* stats,
                         const PlanProgress& progress) {
  if (stats != nullptr) *stats = {};
  return build_plan(checked, quotient, quotient.active() ? stats : nullptr, progress);
}

}  // namespace charm::sched
