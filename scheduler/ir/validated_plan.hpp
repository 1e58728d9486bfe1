#pragma once
// ValidatedPlan: a plan the validator proved (scheduler/validate/validator.hpp), the type every executor runs.
// Only sched::validated() makes one, and the plan inside cannot change after, so no executor asks again
// whether its plan was checked. The executors' own defences (the watchdog, the rule checks that name an op)
// stay for what no proof covers: a process that dies, and the faults a test run injects on purpose
// (rt::Faults, applied to the executor's own copy).

#include <utility>

#include "scheduler/ir/plan.hpp"

namespace charm::sched {
class PlanValidator;
}

namespace charm::ir {

class ValidatedPlan {
 public:
  [[nodiscard]] const Plan& get() const { return plan_; }
  const Plan& operator*() const { return plan_; }
  const Plan* operator->() const { return &plan_; }
  /// The plan itself, no longer proved (it may change from here on).
  [[nodiscard]] Plan release() && { return std::move(plan_); }

 private:
  friend class sched::PlanValidator;
  explicit ValidatedPlan(Plan plan) : plan_(std::move(plan)) {}
  Plan plan_;
};

}  // namespace charm::ir
