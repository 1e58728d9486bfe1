#pragma once
// The paper's closed forms (its Section 3), evaluated from the
// same per-step costs the simulator uses on a uniform topology.
//
// Two variants per algorithm:
//   realised — the closed form of the schedule the planner actually builds
//              (level synchronisation, what overlaps what, the tail); on a
//              contention-free uniform topology the simulator must match it.
//   paper    — the equation as printed (Eq. 2, Eq. 4, Eq. 6), time = n*Tcomp + O.
// docs/validation.md explains every difference between the two.

#include <string>

#include "scheduler/ir/plan.hpp"
#include "sim/compute_model.hpp"

namespace charm::sim {

/// Per-step costs on one uniform link: a message of each kind, a block's compute.
struct StepCosts {
  Seconds t_kv = 0;        // one KV shard
  Seconds t_q = 0;         // one query shard (bwd: the bundle Q, dO, LSE, D)
  Seconds t_out = 0;       // one returned partial (fwd: O + LSE; bwd: dQ in fp32)
  Seconds t_dkv = 0;       // one dK/dV partial (fp32, a running sum: ring, merge), bwd only
  Seconds t_dkv_home = 0;  // one dK/dV partial sent home once (RM+: in the workload's dtype), bwd only
  Seconds t_comp = 0;      // one unmasked block
};

/// Costs of one pass on a uniform topology: bytes / bandwidth + latency per message.
[[nodiscard]] StepCosts uniform_step_costs(const ir::Workload& w, int ranks, ir::Phase phase, double bw_gbps,
                                           double latency_us, const ComputeModel& model);

struct ClosedForm {
  bool available = false;
  Seconds time_s = 0, exposed_s = 0;              // realised
  Seconds paper_time_s = 0, paper_exposed_s = 0;  // as printed
  double ccr = 0;                                 // Eq. 7: sum of Ring's T_comp over sum of its T_comm(kv)
  /// False where the form does not describe the run (said in why_not): the numbers
  /// are then a reference point, not a prediction the simulator should match.
  bool applies = true;
  std::string why_not;
};

/// Closed forms for ring / ring-zigzag, merge and rm+ (others: available = false).
[[nodiscard]] ClosedForm closed_form(const std::string& algo, int ranks, ir::Phase phase, const StepCosts& c);

}  // namespace charm::sim
