// The request checks: an algorithm's name resolved, the request normalised as the planner runs it, and
// checked against what its algorithm can plan (sched::CheckedRequest).

#include "scheduler/planners/request.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/schedules.hpp"
#include "support/number_text.hpp"
#include "support/suggest.hpp"

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

Expected<std::string> resolve_algorithm(std::string_view name, Field field) {
  const auto& names = algorithm_names();
  for (const auto& n : names)
    if (std::equal(n.begin(), n.end(), name.begin(), name.end(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) == std::tolower(static_cast<unsigned char>(b));
        }))
      return n;  // case aside, the name itself (a sweep resolves names per simulation: no allocation here)
  const auto near = closest_name(name, names);
  return Error{field, fmt::format("unknown algorithm '{}' ({}expected one of: {})", name,
                                  near ? fmt::format("did you mean '{}'? ", *near) : "", fmt::join(names, ", "))};
}

Expected<std::vector<std::string>> resolve_algorithms(const std::string& text, Field field) {
  std::vector<std::string> out;
  for (const auto& item : split_list(text)) {
    CHARM_TRY_LET(a, resolve_algorithm(item, field));
    if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(std::move(a));
  }
  if (out.empty()) return Error{field, "names no algorithm"};
  return out;
}

bool uses_domains(const std::string& algo) {
  const Algorithm* a = find_algorithm(algo);
  return a != nullptr && a->uses_domains;
}

bool has_backward(const std::string& algo) {
  const Algorithm* a = find_algorithm(algo);
  return a == nullptr || a->no_backward.empty();
}

namespace {
/// The KV heads algorithm `a` runs `req` with (replicated_kv_heads).
std::int64_t kv_heads_for(const PlanRequest& req, const Algorithm& a) {
  const auto& w = req.workload;
  if (a.heads == Algorithm::HeadSplit::None || req.domains < 1 || req.ranks < 1 || req.ranks % req.domains != 0)
    return w.kv_heads;
  const std::int64_t u = a.heads == Algorithm::HeadSplit::PerDomain ? req.ranks / req.domains : req.ranks;
  // Fewer KV heads than ranks in the all-to-all: DeepSpeed-Ulysses and Megatron-LM repeat each KV head
  // (repeat_kv) until every rank holds one, so long as the query heads still split evenly.
  if (w.kv_heads > 0 && w.kv_heads < u && u % w.kv_heads == 0 && w.heads % u == 0) return u;
  return w.kv_heads;
}

/// `req` as algorithm `a` runs it (normalised).
PlanRequest normalised_for(PlanRequest req, const Algorithm& a) {
  if (a.forced_layout) req.workload.layout = *a.forced_layout;
  req.workload.kv_heads = kv_heads_for(req, a);
  return req;
}

/// Why `algo`, a name the table does not hold as spelt, is refused: spelt otherwise there, or unknown.
Error misnamed_algorithm(const std::string& algo) {
  const auto name = resolve_algorithm(algo);
  if (!name) return name.error();
  return Error{Field::Algo, fmt::format("'{}' is spelt '{}'", algo, *name)};
}

/// Whether algorithm `a` can plan `req` (check_request, the name resolved).
Status check_against(const PlanRequest& req, const Algorithm& a) {
  if (auto s = check_ranks(req.ranks, req.domains); !s) return s;
  const auto& w = req.workload;
  if (a.forced_layout && w.layout != *a.forced_layout)
    return Error{Field::Layout, fmt::format("{} runs on the {} layout (pass --layout {} or use {})", a.name,
                                            to_string(*a.forced_layout), to_string(*a.forced_layout), a.base)};
  if (a.ranks == Algorithm::Ranks::PowerOfTwo && !is_power_of_two(req.ranks))
    return Error{Field::Ranks, fmt::format("{} needs a power-of-two rank count, got {}", a.name, req.ranks)};
  if (a.ranks == Algorithm::Ranks::PowerOfTwoPerDomain && !is_power_of_two(req.ranks / req.domains))
    return Error{Field::Domains,
                 fmt::format("{} needs a power-of-two number of ranks per domain, got {} ranks / {} domains = {}",
                             a.name, req.ranks, req.domains, req.ranks / req.domains)};
  // Domains only change the schedules that use them (uses_domains); the others ignore them.
  if (auto s = w.check(req.ranks); !s) return s;
  if (!a.no_backward.empty() && w.pass != PassKind::Fwd)
    return Error{Field::Pass, fmt::format("{} defines no backward pass ({}); use --pass fwd", a.name, a.no_backward)};
  if (a.token_parts) {
    const auto m = static_cast<std::int64_t>(detail::tasp_cycle_steps(req.ranks).size());
    if (m > 1 && (w.seq / req.ranks) % m != 0)
      return Error{Field::Seq,
                   fmt::format("{} cuts each shard into {} parts (one per Hamiltonian cycle of {} ranks): {} "
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
          w.kv_heads == w.heads ? Field::Heads : Field::KvHeads,
          fmt::format("{} splits heads over {} ranks{}: {} {}heads do not divide (GQA keeps each kv head "
                      "with its query heads){}",
                      a.name, u, per_domain ? " per domain" : "", w.kv_heads, w.kv_heads == w.heads ? "" : "kv ",
                      repeatable ? fmt::format(", and repeating them needs the {} query heads to divide", w.heads)
                                 : "")};
    }
  }
  return {};
}
}  // namespace

std::int64_t replicated_kv_heads(const PlanRequest& req) {
  const Algorithm* a = find_algorithm(req.algo);
  return a != nullptr ? kv_heads_for(req, *a) : req.workload.kv_heads;
}

PlanRequest normalised(PlanRequest req) {
  const Algorithm* a = find_algorithm(req.algo);
  return a != nullptr ? normalised_for(std::move(req), *a) : req;
}

Status check_ranks(int ranks, int domains) {
  if (ranks < 1 || ranks > (1 << 20)) return Error{Field::Ranks, fmt::format("must be in [1, 1048576], got {}", ranks)};
  if (domains < 1 || ranks % domains != 0)
    return Error{Field::Domains, fmt::format("{} domains do not divide {} ranks", domains, ranks)};
  return {};
}

Status check_request(const PlanRequest& req) {
  if (const Algorithm* a = find_algorithm(req.algo)) return check_against(req, *a);
  return misnamed_algorithm(req.algo);
}

// The table's name as spelt first (the request's own path), the diagnosis of any other name after it.
Expected<CheckedRequest> CheckedRequest::check(PlanRequest req) {
  if (const Algorithm* a = find_algorithm(req.algo)) {
    req = normalised_for(std::move(req), *a);
    if (auto s = check_against(req, *a); !s) return s.error();
    PlanEstimate estimate = estimate_plan(req, *a);
    return CheckedRequest(std::move(req), *a, estimate);
  }
  return misnamed_algorithm(req.algo);
}

}  // namespace charm::sched
