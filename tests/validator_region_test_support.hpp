// Helpers shared by the validator's region tests: a small workload, the first violation, op surgery.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/validate/validator.hpp"

namespace charm::ir::test_support {

inline Workload workload(bool causal) {
  Workload w;
  w.seq = 768;  // 2, 3 and 4 ranks, 2 parts
  w.heads = 8;
  w.kv_heads = 4;
  w.head_dim = 16;
  w.causal = causal;
  return w;
}

inline sched::ValidationReport check(const Plan& p) { return sched::validate(p); }
inline std::string first_rule(const Plan& p) {
  auto rep = check(p);
  return rep.ok() ? "ok" : rep.violations.front().rule;
}
inline std::string first_message(const Plan& p) {
  auto rep = check(p);
  return rep.ok() ? "ok" : rep.violations.front().message;
}
inline OpId find(const Plan& p, auto pred) {
  for (OpId id = 0; id < OpId(p.size()); ++id)
    if (pred(p.op(id))) return id;
  ADD_FAILURE() << "no such op";
  return 0;
}
/// A duplicate of op c at the end of the plan, after every op of its rank (so
/// the copy races with nothing: only coverage can object).
inline OpId duplicate(Plan& p, OpId c) {
  const Op dup = p.op(c);
  std::vector<OpId> deps;
  for (OpId id = 0; id < OpId(p.size()); ++id)
    if (p.op(id).rank == dup.rank) deps.push_back(id);
  return p.add_op(dup, deps);
}
/// Removes op c; whoever waited for it waits for what c waited for, its stream
/// predecessor included (so the removal leaves no race behind: only coverage can object).
inline void erase(Plan& p, OpId c) {
  std::vector<OpId> inherited(p.deps(c).begin(), p.deps(c).end());
  for (OpId id = c - 1; id >= 0; --id)
    if (p.op(id).rank == p.op(c).rank && p.op(id).stream == p.op(c).stream) {
      inherited.push_back(id);
      break;
    }
  for (OpId id = 0; id < OpId(p.size()); ++id) {
    const auto d = p.deps(id);
    if (std::find(d.begin(), d.end(), c) == d.end()) continue;
    std::vector<OpId> nd(d.begin(), d.end());
    nd.insert(nd.end(), inherited.begin(), inherited.end());
    p.set_deps(id, nd);
  }
  p.erase_ops(std::vector<OpId>{c});
}

}  // namespace charm::ir::test_support
