#pragma once
// The plan validator (DESIGN section 5). It trusts nothing the planner did and
// proves, for any plan:
//   structure  ops, buffers and results are well formed
//   acyclic    dependencies plus stream order form a DAG
//   matching   every Send has exactly one Recv (stream, endpoints, tag, bytes,
//              payload), and matches pair up in issue order, as NCCL pairs them
//   deadlock   the plan completes under NCCL point-to-point semantics: streams
//              in order, a group issued at once, a send completing only when
//              its receive is posted
//   lifetime   every write to a buffer is ordered (on its rank) against every
//              other access to it, and nothing is read before it is written
//   coverage   symbolic execution: every (q block, kv block) pair the mask
//              leaves is computed exactly once and reaches its owner; backward
//              gradients reach their owners; backward bundles are packed from
//              final outputs

#include <string>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::sched {

struct Violation {
  std::string rule;
  std::string message;
  std::vector<ir::OpId> ops;
};

struct ValidationReport {
  std::vector<Violation> violations;
  std::size_t ops = 0, computes = 0, messages = 0;
  double bytes_moved = 0, flops = 0;
  [[nodiscard]] bool ok() const { return violations.empty(); }
  /// One line: "valid: ..." or the first violation.
  [[nodiscard]] std::string summary(const ir::Plan& plan) const;
};

struct ValidateOptions {
  std::size_t max_violations = 16;
};

[[nodiscard]] ValidationReport validate(const ir::Plan& plan, const ValidateOptions& opt = {});

} // namespace charm::sched
