#pragma once
// The plan validator (the contract in scheduler/ir/plan.hpp). It trusts nothing the planner did and
// proves, for any plan:
//   structure  ops, buffers and results are well formed; region plans keep the
//              Regions rules of plan.hpp (ranges inside the workload, views,
//              whole-shard inputs and results, bytes = region_bytes, equal
//              regions where an op pairs buffers, masks per owner pair or Mixed)
//   acyclic    dependencies plus stream order form a DAG
//   matching   every Send has exactly one Recv (stream, endpoints, tag, bytes,
//              payload kind and region), and matches pair up in issue order, as
//              NCCL pairs them
//   deadlock   the plan completes under NCCL point-to-point semantics: streams
//              in order, a group issued at once, a send completing only when
//              its receive is posted
//   lifetime   every write to a buffer's storage (a view's is its root's) is
//              ordered (on its rank) against every other access to the same
//              owners of it, and nothing is read before it is written; members
//              of one ncclGroup are unordered
//   coverage   symbolic execution per cell (owner, kv head, token part; one
//              cell per buffer in a plain plan): every visible (q block, kv
//              block) pair is computed exactly once and reaches its owner;
//              backward gradients reach their owners; backward bundles are
//              packed from final outputs; no cell is read before it is written

#include <string>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/validated_plan.hpp"
#include "support/expected.hpp"

namespace charm::sched {

struct Violation {
  std::string rule;
  std::string message;
  std::vector<ir::OpId> ops;
};

struct ValidationReport {
  std::vector<Violation> violations;
  /// The validator stopped at ValidateOptions::max_violations: there may be more.
  bool capped = false;
  std::size_t ops = 0, computes = 0, messages = 0;
  double bytes_moved = 0, flops = 0;
  [[nodiscard]] bool ok() const { return violations.empty(); }
  /// One line: "valid: ..." or the first violation.
  [[nodiscard]] std::string summary(const ir::Plan& plan) const;
};

struct ValidateOptions {
  /// Where the validator stops looking (a broken plan can break every op);
  /// `charm validate --all` lifts it.
  std::size_t max_violations = 16;
};

[[nodiscard]] ValidationReport validate(const ir::Plan& plan, const ValidateOptions& opt = {});

/// `plan` proved, as the one type the executors run; or why not: an error whose message is the report's
/// summary (its first violation), for the caller to say whose plan it was.
[[nodiscard]] Expected<ir::ValidatedPlan> validated(ir::Plan plan);

}  // namespace charm::sched
