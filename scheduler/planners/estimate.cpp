// What building a plan would cost, known before building it (sched::PlanEstimate), and the memory budget
// that judges it (sched::MemoryBudget).

#include "scheduler/planners/estimate.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>

#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/plan_builder.hpp"
#include "scheduler/planners/request.hpp"
#include "scheduler/planners/schedules.hpp"
#include "support/number_text.hpp"

namespace charm::sched {

using namespace charm::ir;

namespace {
/// The share of (query shard, kv shard) blocks a causal mask on the contiguous layout leaves some pair
/// visible in: (n + 1) / 2n for the plain causal mask, less for documents and windows. The first query
/// of a shard sees back furthest (first_visible never decreases), so shard i sees kv shards
/// first_visible(i S) / S to i.
double visible_block_share(const ir::Workload& w, int ranks) {
  const std::int64_t S = std::max<std::int64_t>(1, w.shard_tokens(ranks));
  std::vector<std::int64_t> starts;  // where each document starts
  for (std::int64_t at = 0; const std::int64_t len : w.documents) {
    starts.push_back(at);
    at += len;
  }
  double visible = 0;
  for (std::int64_t i = 0; i < ranks; ++i) {
    const std::int64_t q = i * S;
    std::int64_t first = 0;  // first_visible(q), by bisection over the documents
    if (auto it = std::upper_bound(starts.begin(), starts.end(), q); it != starts.begin()) first = *std::prev(it);
    if (w.window > 0) first = std::max(first, q - w.window + 1);
    visible += double(i - std::min(i, first / S) + 1);
  }
  return visible / (double(ranks) * double(ranks));
}
}  // namespace

PlanEstimate estimate_plan(const PlanRequest& req) {
  const Algorithm* a = find_algorithm(req.algo);
  return estimate_plan(req, a != nullptr ? *a : algorithms().front());  // an unchecked name: the ring's figures
}

PlanEstimate estimate_plan(const PlanRequest& req, const Algorithm& alg) {
  const double parts = alg.token_parts ? double(detail::tasp_cycle_steps(std::max(1, req.ranks)).size()) : 1;
  const double n = std::max(1, req.ranks), d = std::clamp(double(req.domains), 1.0, n);
  const double fwd = alg.ops_fwd.at(n, d) * parts, both = alg.ops_both.at(n, d) * parts;
  const double per = req.workload.pass == PassKind::Fwd ? fwd : req.workload.pass == PassKind::Both ? both : both - fwd;
  // The mask: on the contiguous layout a causal plan has no block where a query shard sees none of a kv shard:
  // (n + 1) / 2n of them are left under the plain causal mask, fewer under documents and windows
  // (visible_block_share; zigzag spreads every shard over the sequence, and is counted whole). rm+ and
  // charm plan pairs, transfers included, so their ops scale by it; the ring family (ring, merge, allgather-kv,
  // tasp) still moves every shard, and only its computes (a third of the forward's ops, a fifth of the backward's)
  // go; ulysses and usp compute whole heads locally. Measured at 32 ranks: charm 0.53, rm+ 0.50, ring 0.84 (fwd).
  double masked = 1;
  if (req.workload.causal && req.workload.layout == Layout::Contiguous) {
    const double hidden = 1 - visible_block_share(req.workload, req.ranks);
    if (alg.causal_ops == Algorithm::CausalOps::Pairs)
      masked = 1 - hidden;
    else if (alg.causal_ops == Algorithm::CausalOps::ComputesOnly)
      masked = 1 - (req.workload.pass == PassKind::Fwd ? 1.0 / 3 : 0.22) * hidden;
  }
  PlanEstimate e;
  e.ops = masked * per + 8.0 * req.ranks;
  e.plan_bytes = kPlanBytesPerOp * e.ops;
  return e;
}

namespace {
/// The quotient plan's estimate from the full plan's (`full`), for algorithm `a` (null: unknown).
PlanEstimate quotient_estimate(const PlanRequest& req, const Algorithm* a, const PlanEstimate& full,
                               const RankSymmetry& quotient) {
  // A symmetric plan's ranks hold equal shares of its ops and buffers. Buffers per op, measured at
  // 64 and 256 ranks: 0.33 (fwd) to 0.52 (bwd), ulysses and usp 0.7. A phantom costs nothing while
  // whole shards fit the ids (PhantomBuffers), else a 16-byte record; one cut finer (tasp's parts,
  // usp's head slices) adds a 48-byte Buffer in a vector, which holds 1.5 times that on average. The schedules' tables
  // over all ranks: merge keeps each rank's received blocks (and backward its partials), allgather-kv
  // its gathered blocks (and backward its partials), ranks^2 ids each.
  const double n = std::max(1, req.ranks), block = quotient.active() ? std::clamp(double(quotient.block), 1.0, n) : n;
  const bool heads = a != nullptr && a->heads != Algorithm::HeadSplit::None;
  const bool regions = heads || (a != nullptr && a->token_parts);
  const bool fits = PhantomBuffers::encodes_shards(int(n), RankId(block));
  PlanEstimate e;
  e.ops = full.ops * block / n;
  e.phantom_buffers = (heads ? 0.7 : 0.5) * full.ops * (n - block) / n;
  e.phantom_bytes = e.phantom_buffers * (regions ? 16.0 + 1.5 * 48 : fits ? 0.0 : 16.0);
  const double tables = a != nullptr ? a->gather_tables * (req.workload.pass == PassKind::Fwd ? 1 : 2) : 0;
  e.planner_bytes = tables * 4.0 * n * n + 256.0 * n;
  e.plan_bytes = kPlanBytesPerOp * e.ops + e.phantom_bytes + e.planner_bytes;
  return e;
}

}  // namespace

PlanEstimate estimate_quotient_plan(const PlanRequest& req, const RankSymmetry& quotient) {
  const Algorithm* a = find_algorithm(req.algo);
  return quotient_estimate(req, a, estimate_plan(req), quotient);
}

PlanEstimate estimate_quotient_plan(const CheckedRequest& req, const RankSymmetry& quotient) {
  return quotient_estimate(req.get(), &req.algorithm(), req.estimate(), quotient);
}

std::string over_budget_text(const std::string& what, double bytes, double budget, const std::string& budget_name) {
  auto gb = [](double b) { return b >= 1e12 ? fmt::format("{:.3g} TB", b / 1e12) : fmt::format("{:.3g} GB", b / 1e9); };
  return fmt::format("{} would need about {}, more than the {} budget ({}); make it smaller, or raise --max-memory",
                     what, gb(bytes), gb(budget), budget_name);
}

Status MemoryBudget::fits(double need, const std::string& what, Field field) const {
  if (need <= bytes) return {};
  return Error{field, over_budget_text(what, need, bytes, name)};
}

Status MemoryBudget::fits(double need, const std::string& what, const std::string& where) const {
  if (need <= bytes) return {};
  return Error{where, over_budget_text(what, need, bytes, name)};
}

namespace {
/// Whether `budget` holds building `req`'s plan, estimated at `e`, with `extra_bytes_per_op` more an op.
Status fits_estimate(const MemoryBudget& budget, const PlanRequest& req, const PlanEstimate& e,
                     double extra_bytes_per_op, const std::string& what, const RankSymmetry& quotient) {
  if (!quotient.active())
    return budget.fits(e.plan_bytes + extra_bytes_per_op * e.ops,
                       fmt::format("{} ({} on {} ranks: about {:.2g} ops)", what, req.algo, req.ranks, e.ops),
                       Field::Ranks);
  // The planner still describes every rank: its buffers on the other ranks (phantoms) are the bulk.
  return budget.fits(
      e.plan_bytes + extra_bytes_per_op * e.ops,
      fmt::format("{} of one class of {} rank{} ({} on {} ranks: about {:.2g} ops, and {:.2g} buffers of the "
                  "other ranks)",
                  what, quotient.block, quotient.block == 1 ? "" : "s", req.algo, req.ranks, e.ops, e.phantom_buffers),
      Field::Ranks);
}

}  // namespace

Status MemoryBudget::fits_plan(const PlanRequest& req, double extra_bytes_per_op, const std::string& what,
                               const RankSymmetry& quotient) const {
  const PlanEstimate e = quotient.active() ? estimate_quotient_plan(req, quotient) : estimate_plan(req);
  return fits_estimate(*this, req, e, extra_bytes_per_op, what, quotient);
}

Status MemoryBudget::fits_plan(const CheckedRequest& req, double extra_bytes_per_op, const std::string& what,
                               const RankSymmetry& quotient) const {
  const PlanEstimate e = quotient.active() ? estimate_quotient_plan(req, quotient) : req.estimate();
  return fits_estimate(*this, req.get(), e, extra_bytes_per_op, what, quotient);
}

Expected<MemoryBudget> memory_budget(const std::string& text) {
  if (!text.empty()) {
    const auto v = parse_size(text, "--max-memory");
    if (!v) return v.error();
    if (*v < (1 << 20)) return Error{Field::MaxMemory, fmt::format("must be at least 1M, got {}", text)};
    return MemoryBudget{double(*v), "--max-memory"};
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return MemoryBudget{pages > 0 && page > 0 ? 0.5 * double(pages) * double(page) : 8e9,
                      "half of this machine's memory"};
}

}  // namespace charm::sched
