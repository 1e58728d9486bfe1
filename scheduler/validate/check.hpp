#pragma once
// What the validator's checks share (validator.hpp lists their rules): the plan, the report they
// write to, what the structure check learnt about the plan's buffers, and, once the structure
// holds, the stream index and the replay order. Each check is a class over this state, in its
// own file: structure.cpp, streams.cpp (acyclic, matching), deadlock.cpp, lifetime.cpp,
// coverage.cpp; validator.cpp runs them in that order, each only while the ones before it hold.

#include <fmt/format.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/ir/region.hpp"
#include "scheduler/validate/validator.hpp"

namespace charm::sched::checks {

using namespace charm::ir;

struct State {
  State(const Plan& p, const ValidateOptions& o) : plan(p), opt(o) {}

  const Plan& plan;
  ValidateOptions opt;
  ValidationReport report;
  // The region features the plan uses (structure), so that a plain plan pays for none.
  std::int32_t kv_heads = 1;
  bool regions = false;      // some buffer is not one whole shard, or parts > 1
  bool views = false;        // some buffer is a view
  bool split_heads = false;  // some buffer holds part of the kv heads
  bool reuses = false;       // some buffer takes over the storage of another
  /// Per buffer: its first (owner, kv head, token part) cell (roots; regions only), and the total last.
  std::vector<std::uint32_t> cell_base;
  std::optional<PlanIndex> index;  // built once the structure holds
  MessageOrder messages;           // the index's sorted sends and receives (matching only)
  std::vector<OpId> order;         // completion order under NCCL semantics (deadlock), replayed by the later checks
};

/// The base of the checks: reporting, names, and buffer regions as the structure check resolved them.
class Check {
 protected:
  explicit Check(State& s) : s_(s), p_(s.plan), n_(s.plan.size()) {}

  [[nodiscard]] bool full() const { return s_.report.violations.size() >= s_.opt.max_violations; }
  [[nodiscard]] bool ok() const { return s_.report.ok(); }
  void fail(const char* rule, std::string msg, std::vector<OpId> ops = {}) {
    if (full()) return;
    s_.report.violations.push_back({rule, std::move(msg), std::move(ops)});
    s_.report.capped = full();
  }
  [[nodiscard]] std::string name(OpId id) const {
    return fmt::format("op {} (rank {}, {}: {})", id, p_.op(id).rank, to_string(p_.op(id).stream), op_label(p_, id));
  }
  [[nodiscard]] std::string label(BufferId b) const { return fmt::format("buffer {} ({})", b, buffer_label(p_, b)); }

  /// A buffer's region, defaults resolved (Plan::region, inline: it runs for every slot of every op).
  [[nodiscard]] Region reg(BufferId b) const {
    const Buffer& x = p_.buffer(b);
    return {x.owner,      x.owner + x.owners,
            x.head_begin, x.heads == 0 ? s_.kv_heads : x.head_begin + x.heads,
            x.part_begin, x.parts == 0 ? p_.parts : x.part_begin + x.parts};
  }
  /// The buffer whose storage b is (the structure check has made sure a view's parent is no view).
  [[nodiscard]] BufferId root_of(BufferId b) const {
    return s_.views && p_.buffer(b).parent != kNone ? p_.buffer(b).parent : b;
  }
  /// Equal regions (in a plain plan: the same owner, without computing regions).
  [[nodiscard]] bool same_region(BufferId a, BufferId b) const {
    return s_.regions ? reg(a) == reg(b) : p_.buffer(a).owner == p_.buffer(b).owner;
  }
  /// Places (in the index's stream order) of the group before `id`'s group on its stream (empty at the front).
  [[nodiscard]] std::pair<std::uint32_t, std::uint32_t> prev_group(OpId id) const {
    const PlanIndex& idx = *s_.index;
    const std::uint32_t start = idx.group_begin(id);
    if (start == idx.lane_begin(idx.lane_of(id))) return {start, start};
    return {idx.group_begin(idx.at(start - 1)), start};
  }

  State& s_;
  const Plan& p_;
  std::size_t n_;  // the plan's ops
};

// The checks, in the order the validator runs them; each returns whether its rules hold.
[[nodiscard]] bool check_structure(State& s);
[[nodiscard]] bool check_acyclic(State& s);
[[nodiscard]] bool check_matching(State& s);
[[nodiscard]] bool check_deadlock(State& s);
void check_lifetime(State& s);
void check_coverage(State& s);

}  // namespace charm::sched::checks
