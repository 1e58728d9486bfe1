// The validator: its checks (validator.hpp lists their rules) in order, each only while the ones before it hold.
// The checks live in their own files over one shared state (check.hpp).
#include "scheduler/validate/validator.hpp"

#include <fmt/format.h>

#include "scheduler/validate/check.hpp"

namespace charm::sched {

using namespace charm::ir;

namespace {

/// The plan's size figures of the report.
void count(checks::State& s) {
  ValidationReport& r = s.report;
  r.ops = s.plan.size();
  for (const Op& o : s.plan.ops()) {
    if (o.kind == OpKind::Compute) {
      ++r.computes;
      r.flops += o.flops;
    }
    if (o.kind == OpKind::Send) {
      ++r.messages;
      r.bytes_moved += double(o.bytes);
    }
  }
}

}  // namespace

std::string ValidationReport::summary(const Plan& plan) const {
  if (!ok()) {
    const auto& v = violations.front();
    const std::string more = !capped ? fmt::format(" (and {} more)", violations.size() - 1)
                             : violations.size() > 1
                                 ? fmt::format(" (and {} more before the validator stopped looking; "
                                               "charm validate --all lists every one)",
                                               violations.size() - 1)
                                 : " (the validator stopped looking; charm validate --all lists every one)";
    return fmt::format("invalid: [{}] {}{}", v.rule, v.message, violations.size() > 1 || capped ? more : "");
  }
  return fmt::format(
      "valid: {} {} {} ranks x {} domain(s), {} ops ({} compute, {} messages, {:.3g} GB moved, {:.3g} TFLOP)",
      plan.algo, to_string(plan.workload.pass), plan.ranks, plan.domains, ops, computes, messages, bytes_moved / 1e9,
      flops / 1e12);
}

ValidationReport validate(const Plan& plan, const ValidateOptions& opt) {
  CHARM_ASSERT(!plan.symmetry.active(), "the validator proves full plans (a quotient's symmetry: ir::check_symmetric)");
  checks::State s(plan, opt);
  count(s);
  if (!checks::check_structure(s)) return std::move(s.report);
  s.index.emplace(plan, &s.messages);
  if (!checks::check_acyclic(s) || !checks::check_matching(s)) return std::move(s.report);
  s.messages = {};  // only the matching check reads them
  if (!checks::check_deadlock(s)) return std::move(s.report);
  checks::check_lifetime(s);
  checks::check_coverage(s);
  return std::move(s.report);
}

/// The one maker of ir::ValidatedPlan (its friend).
class PlanValidator {
 public:
  static ir::ValidatedPlan proved(Plan plan) { return ir::ValidatedPlan(std::move(plan)); }
};

Expected<ir::ValidatedPlan> validated(Plan plan) {
  if (const auto rep = validate(plan); !rep.ok()) return Error{"", rep.summary(plan)};
  return PlanValidator::proved(std::move(plan));
}

}  // namespace charm::sched
