#pragma once
// Faults a test run injects on purpose (charm run's --inject-* flags), for the runtime's defences to name:
// a stall, a missing block, a short receive. An executor takes a validated plan and breaks its own copy, so
// the plan it was given stays the one the validator proved.

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/validated_plan.hpp"

namespace charm::rt {

struct Faults {
  bool drop_first_send = false;            // its Recv never completes: the watchdog reports a stall
  bool drop_first_remote_compute = false;  // one block pairing two ranks is never computed: the check fails
  bool short_recv = false;                 // backend mpi: rank 1 posts its first receive one float short
  /// Whether the faults remove ops from the plan (the others act while it runs).
  [[nodiscard]] bool break_plan() const { return drop_first_send || drop_first_remote_compute; }
};

/// `plan` with the ops `faults` drop removed.
[[nodiscard]] ir::Plan broken_copy(const ir::Plan& plan, const Faults& faults);

/// run(p) on the plan an executor runs: the validated plan itself, or its copy broken by `faults` where they
/// drop ops. Every executor's entry goes through it.
template <class Run>
auto run_with_faults(const ir::ValidatedPlan& plan, const Faults& faults, Run&& run) {
  if (!faults.break_plan()) return run(*plan);
  return run(broken_copy(*plan, faults));
}

}  // namespace charm::rt
