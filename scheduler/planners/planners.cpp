// The pass driver: inputs per rank, the forward schedule, the backward bundle
// and the backward schedule, for every algorithm.

#include "scheduler/planners/planners.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <numeric>

#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/schedules.hpp"
#include "scheduler/support/suggest.hpp"

namespace charm::sched {

using namespace charm::ir;

const std::vector<std::string>& algorithm_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& a : algorithms()) v.emplace_back(a.name);
    return v;
  }();
  return names;
}

namespace {
/// The row of a request's algorithm (check_request has resolved the name).
const Algorithm& row(const std::string& name) {
  const Algorithm* a = find_algorithm(name);
  CHARM_ASSERT(a != nullptr, "a checked request names a known algorithm");
  return *a;
}
}  // namespace

Expected<std::string> resolve_algorithm(std::string_view name, const std::string& flag) {
  const auto& names = algorithm_names();
  for (const auto& n : names)
    if (std::equal(n.begin(), n.end(), name.begin(), name.end(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return n;  // case aside, the name itself (a sweep resolves names per simulation: no allocation here)
  const auto near = closest_name(name, names);
  return Error{flag, fmt::format("unknown algorithm '{}' ({}expected one of: {})", name,
                                 near ? fmt::format("did you mean '{}'? ", *near) : "", fmt::join(names, ", "))};
}

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
  const Algorithm& alg = a != nullptr ? *a : algorithms().front();  // an unchecked name: the ring's figures
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

std::string over_budget_text(const std::string& what, double bytes, double budget, const std::string& budget_name) {
  auto gb = [](double b) { return b >= 1e12 ? fmt::format("{:.3g} TB", b / 1e12) : fmt::format("{:.3g} GB", b / 1e9); };
  return fmt::format("{} would need about {}, more than the {} budget ({}); make it smaller, or raise --max-memory",
                     what, gb(bytes), gb(budget), budget_name);
}

Status MemoryBudget::fits(double need, const std::string& what, const std::string& flag) const {
  if (need <= bytes) return {};
  return Error{flag, over_budget_text(what, need, bytes, name)};
}

Status MemoryBudget::fits_plan(const PlanRequest& req, double extra_bytes_per_op, const std::string& what,
                               const RankSymmetry& quotient) const {
  if (!quotient.active()) {
    const auto e = estimate_plan(req);
    return fits(e.plan_bytes + extra_bytes_per_op * e.ops,
                fmt::format("{} ({} on {} ranks: about {:.2g} ops)", what, req.algo, req.ranks, e.ops), "--ranks");
  }
  // The planner still describes every rank: its buffers on the other ranks (phantoms) are the bulk.
  const auto e = estimate_quotient_plan(req, quotient);
  return fits(e.plan_bytes + extra_bytes_per_op * e.ops,
              fmt::format("{} of one class of {} rank{} ({} on {} ranks: about {:.2g} ops, and {:.2g} buffers of the "
                          "other ranks)",
                          what, quotient.block, quotient.block == 1 ? "" : "s", req.algo, req.ranks, e.ops,
                          e.phantom_buffers),
              "--ranks");
}

PlanEstimate estimate_quotient_plan(const PlanRequest& req, const RankSymmetry& quotient) {
  // A symmetric plan's ranks hold equal shares of its ops and buffers. Buffers per op, measured at
  // 64 and 256 ranks: 0.33 (fwd) to 0.52 (bwd), ulysses and usp 0.7. A phantom costs nothing while
  // whole shards fit the ids (PhantomBuffers), else a 16-byte record; one cut finer (tasp's parts,
  // usp's head slices) adds a 48-byte Buffer in a vector, which holds 1.5 times that on average. The schedules' tables
  // over all ranks: merge keeps each rank's received blocks (and backward its partials), allgather-kv
  // its gathered blocks (and backward its partials), ranks^2 ids each.
  const PlanEstimate full = estimate_plan(req);
  const double n = std::max(1, req.ranks), block = quotient.active() ? std::clamp(double(quotient.block), 1.0, n) : n;
  const Algorithm* a = find_algorithm(req.algo);
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

bool uses_domains(const std::string& algo) {
  const Algorithm* a = find_algorithm(algo);
  return a != nullptr && a->uses_domains;
}

bool has_backward(const std::string& algo) {
  const Algorithm* a = find_algorithm(algo);
  return a == nullptr || a->no_backward.empty();
}

std::int64_t replicated_kv_heads(const PlanRequest& req) {
  const Algorithm* a = find_algorithm(req.algo);
  const auto& w = req.workload;
  if (a == nullptr || a->heads == Algorithm::HeadSplit::None || req.domains < 1 || req.ranks < 1 ||
      req.ranks % req.domains != 0)
    return w.kv_heads;
  const std::int64_t u = a->heads == Algorithm::HeadSplit::PerDomain ? req.ranks / req.domains : req.ranks;
  // Fewer KV heads than ranks in the all-to-all: DeepSpeed-Ulysses and Megatron-LM repeat each KV head
  // (repeat_kv) until every rank holds one, so long as the query heads still split evenly.
  if (w.kv_heads > 0 && w.kv_heads < u && u % w.kv_heads == 0 && w.heads % u == 0) return u;
  return w.kv_heads;
}

PlanRequest normalised(PlanRequest req) {
  if (const Algorithm* a = find_algorithm(req.algo); a != nullptr && a->forced_layout)
    req.workload.layout = *a->forced_layout;
  req.workload.kv_heads = replicated_kv_heads(req);
  return req;
}

Status check_ranks(int ranks, int domains) {
  if (ranks < 1 || ranks > (1 << 20)) return Error{"--ranks", fmt::format("must be in [1, 1048576], got {}", ranks)};
  if (domains < 1 || ranks % domains != 0)
    return Error{"--domains", fmt::format("{} domains do not divide {} ranks", domains, ranks)};
  return {};
}

Status check_request(const PlanRequest& req) {
  if (auto a = resolve_algorithm(req.algo); !a)
    return a.error();
  else if (*a != req.algo)
    return Error{"--algo", fmt::format("'{}' is spelt '{}'", req.algo, *a)};
  if (auto s = check_ranks(req.ranks, req.domains); !s) return s;
  const Algorithm& a = row(req.algo);
  const auto& w = req.workload;
  if (a.forced_layout && w.layout != *a.forced_layout)
    return Error{"--layout", fmt::format("{} runs on the {} layout (pass --layout {} or use {})", a.name,
                                         to_string(*a.forced_layout), to_string(*a.forced_layout), a.base)};
  if (a.ranks == Algorithm::Ranks::PowerOfTwo && !is_power_of_two(req.ranks))
    return Error{"--ranks", fmt::format("{} needs a power-of-two rank count, got {}", a.name, req.ranks)};
  if (a.ranks == Algorithm::Ranks::PowerOfTwoPerDomain && !is_power_of_two(req.ranks / req.domains))
    return Error{"--domains",
                 fmt::format("{} needs a power-of-two number of ranks per domain, got {} ranks / {} domains = {}",
                             a.name, req.ranks, req.domains, req.ranks / req.domains)};
  // Domains only change the schedules that use them (uses_domains); the others ignore them.
  if (auto s = w.check(req.ranks); !s) return s;
  if (!a.no_backward.empty() && w.pass != PassKind::Fwd)
    return Error{"--pass", fmt::format("{} defines no backward pass ({}); use --pass fwd", a.name, a.no_backward)};
  if (a.token_parts) {
    const auto m = static_cast<std::int64_t>(detail::tasp_cycle_steps(req.ranks).size());
    if (m > 1 && (w.seq / req.ranks) % m != 0)
      return Error{"--seq", fmt::format("{} cuts each shard into {} parts (one per Hamiltonian cycle of {} ranks): {} "
                                        "tokens per shard do not divide",
                                        a.name, m, req.ranks, w.seq / req.ranks)};
  }
  if (a.heads != Algorithm::HeadSplit::None) {
    const bool per_domain = a.heads == Algorithm::HeadSplit::PerDomain;
    const int u = per_domain ? req.ranks / req.domains : req.ranks;
    if (w.kv_heads % u != 0) {
      // Fewer kv heads than ranks would be repeated (normalised) had the query heads divided.
      const bool repeatable = w.kv_heads > 0 && w.kv_heads < u && u % w.kv_heads == 0;
      return Error{
          w.kv_heads == w.heads ? "--heads" : "--kv-heads",
          fmt::format("{} splits heads over {} ranks{}: {} {}heads do not divide (GQA keeps each kv head "
                      "with its query heads){}",
                      a.name, u, per_domain ? " per domain" : "", w.kv_heads, w.kv_heads == w.heads ? "" : "kv ",
                      repeatable ? fmt::format(", and repeating them needs the {} query heads to divide", w.heads)
                                 : "")};
    }
  }
  return {};
}

namespace {

void plan_forward(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest& req) {
  b.set_phase(Phase::Fwd);
  row(req.algo).forward(b, st, req);
}

void plan_backward(PlanBuilder& b, std::vector<detail::RankState>& st, const PlanRequest& req) {
  const Algorithm& a = row(req.algo);
  b.set_phase(Phase::Bwd);
  if (!a.packs_bundle) {
    for (std::size_t r = 0; r < st.size(); ++r) {
      const BufferId dout = b.buffer(RankId(r), BufKind::Dout, RankId(r), BufInit::Input);
      BufferId out = b.results(RankId(r)).out;
      if (req.workload.pass == PassKind::Bwd) {
        out = b.buffer(RankId(r), BufKind::Out, RankId(r), BufInit::Input);
        b.results(RankId(r)).out = out;
      }
      st[r].qbundle = b.buffer(RankId(r), BufKind::QBundle, RankId(r), BufInit::None);
      b.pack(st[r].q, dout, out, st[r].qbundle);
    }
  }
  a.backward(b, st, req);
}

/// The plan of a checked, normalised request, or its quotient under an active `quotient`.
Plan build_plan(const PlanRequest& req, const RankSymmetry& quotient, QuotientStats* stats = nullptr,
                const PlanProgress& progress = {}) {
  const int n = req.ranks;
  PlanBuilder b(req.algo, req.workload, n, req.domains, quotient);
  if (progress) b.on_progress(progress);
  // Large plans get a little over the estimate up front: growing past it would copy every
  // op (half the planner's time at 512 ranks); small ones grow as they go.
  const double ops = quotient.active() ? estimate_quotient_plan(req, quotient).ops : estimate_plan(req).ops;
  if (ops >= 65536) b.reserve(std::size_t(ops * 1.1));
  if (row(req.algo).token_parts) b.set_parts(std::max<int>(1, int(detail::tasp_cycle_steps(n).size())));
  std::vector<detail::RankState> st(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < st.size(); ++r) {
    st[r].q = b.buffer(RankId(r), BufKind::Q, RankId(r), BufInit::Input);
    st[r].kv = b.buffer(RankId(r), BufKind::Kv, RankId(r), BufInit::Input);
  }
  if (req.workload.pass != PassKind::Bwd) plan_forward(b, st, req);
  if (req.workload.pass != PassKind::Fwd) plan_backward(b, st, req);
  if (stats != nullptr) *stats = {b.phantoms().count(), b.phantoms().memory_bytes()};
  return std::move(b).finish();
}

}  // namespace

Expected<CheckedRequest> CheckedRequest::check(PlanRequest req) {
  req = normalised(std::move(req));
  if (auto s = check_request(req); !s) return s.error();
  return CheckedRequest(std::move(req));
}

Expected<Plan> make_plan(const PlanRequest& req) {
  const auto checked = CheckedRequest::check(req);
  if (!checked) return checked.error();
  return build_plan(checked->get(), {});
}

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
RankSymmetry unmasked_symmetry(const PlanRequest& req) {
  PlanRequest full = req;
  full.workload.causal = false;
  full.workload.documents.clear();
  return row(req.algo).symmetry(full);
}

/// The unmasked symmetry coarsened to a multiple of `period` ranks.
RankSymmetry with_period(const PlanRequest& req, int period) {
  RankSymmetry s = unmasked_symmetry(req);
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
  const int n = req.ranks;
  const ir::Workload& w = req.workload;
  RankSymmetry s;
  if (!w.position_mask())
    s = row(req.algo).symmetry(req);
  else if (const int period = document_period(w, n); period > 0)
    s = with_period(req, period);  // documents of one length repeat; other documents and windows do not
  // The pieces are all the mask changes, but for TASP, whose token parts cut a half block unevenly.
  if (!s.active() && zigzag_halves_alike && w.causal && !w.position_mask() && w.layout == Layout::Zigzag &&
      !row(req.algo).token_parts) {
    s = unmasked_symmetry(req);  // by cost
    s.zigzag_halves_alike = s.active();
  }
  return s.active() && s.block < n && check_symmetry_shape(s, n).ok() ? s : RankSymmetry{};
}

namespace {
/// The plan's own symmetry, where `quotient` coarsens it (check_quotient's test); why not otherwise.
Expected<RankSymmetry> coarsened_symmetry(const CheckedRequest& checked, const RankSymmetry& quotient) {
  const PlanRequest& req = checked.get();
  if (auto s = check_symmetry_shape(quotient, req.ranks); !s) return s.error();
  const RankSymmetry s = plan_symmetry(checked, quotient.zigzag_halves_alike);
  if (!s.active())
    return Error{"symmetry",
                 fmt::format("{}'s plan for this request has no rank symmetry to take a quotient by", req.algo)};
  if (quotient.kind != s.kind || quotient.block % s.block != 0)
    return Error{"symmetry", fmt::format("{} symmetry in blocks of {} does not coarsen the plan's, {} in blocks of {}",
                                         to_string(quotient.kind), quotient.block, to_string(s.kind), s.block)};
  return s;
}
}  // namespace

Status check_quotient(const PlanRequest& req, const RankSymmetry& quotient) {
  if (auto s = check_symmetry_shape(quotient, req.ranks); !s) return s.error();
  const auto checked = CheckedRequest::check(req);
  if (!checked)
    return Error{"symmetry",
                 fmt::format("{}'s plan for this request has no rank symmetry to take a quotient by", req.algo)};
  if (auto s = coarsened_symmetry(*checked, quotient); !s) return s.error();
  return {};
}

Expected<Plan> make_plan(const PlanRequest& req, RankSymmetry quotient, QuotientStats* stats,
                         const PlanProgress& progress) {
  if (stats != nullptr) *stats = {};
  const auto checked = CheckedRequest::check(req);
  if (!checked) return checked.error();
  return make_plan(*checked, quotient, stats, progress);
}

Expected<Plan> make_plan(const CheckedRequest& checked, RankSymmetry quotient, QuotientStats* stats,
                         const PlanProgress& progress) {
  if (stats != nullptr) *stats = {};
  const PlanRequest& req = checked.get();
  if (!quotient.active()) return build_plan(req, {}, nullptr, progress);
  const auto s = coarsened_symmetry(checked, quotient);  // also what the images may differ in
  if (!s) return s.error();
  quotient.heads_are_labels = s->heads_are_labels;
  quotient.zigzag_halves_alike = s->zigzag_halves_alike;
  return build_plan(req, quotient, stats, progress);
}

}  // namespace charm::sched
