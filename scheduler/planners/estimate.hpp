#pragma once
// What building a plan would cost, known before building it (PlanEstimate), and the memory budget that
// judges work by it (MemoryBudget): the planner's estimates, for refusing up front what would not fit.

#include <limits>
#include <string>

#include "scheduler/ir/plan.hpp"

namespace charm::sched {

struct Algorithm;  // algorithms.hpp: the algorithm table's row
struct PlanRequest;
class CheckedRequest;

/// What building a plan would cost, known before building it: op count and the plan's
/// memory. The op counts are ~c x ranks^2 (each rank meets every other rank's shard), with
/// c per algorithm and pass, and for charm and usp by domains (Algorithm::OpCount); TASP multiplies by
/// its part count; a causal mask on the contiguous layout takes the blocks it hides off
/// (rm+ and charm about half their ops, the ring family a sixth of the forward's). An estimate, for refusing up front
/// what would not fit, never for sizing.
struct PlanEstimate {
  double ops = 0;
  // Building the plan: its ops, dependencies and buffers, and the planner's tables (kPlanBytesPerOp an op).
  double plan_bytes = 0;
  // A quotient plan's (estimate_quotient_plan): plan_bytes above counts these too.
  double phantom_buffers = 0;  // buffers the planner makes on phantom ranks (ring: about ranks^2)
  double phantom_bytes = 0;    // the store that holds them (PhantomBuffers)
  double planner_bytes = 0;    // the schedule's tables over all ranks (merge, allgather-kv: ranks^2 ids)
};
[[nodiscard]] PlanEstimate estimate_plan(const PlanRequest& req);
/// The same for algorithm `a`'s row (the request's, found once).
[[nodiscard]] PlanEstimate estimate_plan(const PlanRequest& req, const Algorithm& a);
/// The memory building a plan takes an op at its peak, and what simulating it adds over that peak (the
/// simulator's state takes the planner's freed tables first). Measured at 512 ranks as the process's peak
/// resident memory after each stage (bench/scale_stages), ring, merge, rm+, charm and allgather-kv, both
/// passes, full, causal and causal zigzag: building 105-121 bytes an op, building then simulating 119-137
/// (48-byte ops).
/// `charm simulate`, `advise`, `show` and `calibrate` check simulation_bytes (below) against the budget.
inline constexpr double kPlanBytesPerOp = 115;
inline constexpr double kSimBytesPerOp = 25;
/// What simulating the plan of estimate `e` holds at its peak: the plan and the simulator's state
/// (kSimBytesPerOp an op). A deployment placing one group's plan as `placed_groups` whole groups holds the
/// group's plan beside the placed one: placed_groups + 1 times the group's. The one formula every command
/// judges a simulation by.
[[nodiscard]] inline double simulation_bytes(const PlanEstimate& e, int placed_groups = 0) {
  return (e.plan_bytes + kSimBytesPerOp * e.ops) * (placed_groups > 0 ? placed_groups + 1 : 1);
}
/// The line that refuses work estimated to need `bytes` over a `budget` of bytes, named
/// `budget_name` ("--max-memory", "half of this machine's memory"): one text for every command.
[[nodiscard]] std::string over_budget_text(const std::string& what, double bytes, double budget,
                                           const std::string& budget_name);
/// The same for the quotient plan under `quotient` (a coarsening of plan_symmetry(req)): its ops
/// and memory, with the phantom buffers and the schedule's tables, which the planner still makes
/// for every rank (it describes every rank, and emits the representatives' ops only).
[[nodiscard]] PlanEstimate estimate_quotient_plan(const PlanRequest& req, const ir::RankSymmetry& quotient);
/// estimate_quotient_plan for a checked request, from its estimate.
[[nodiscard]] PlanEstimate estimate_quotient_plan(const CheckedRequest& req, const ir::RankSymmetry& quotient);

/// What work may take of this machine's memory, and how that was chosen ("--max-memory", "half of this
/// machine's memory"). The estimates above judge work against it before the work starts.
struct MemoryBudget {
  double bytes = std::numeric_limits<double>::infinity();
  std::string name = "no limit";
  /// Refuses `what`, estimated at `need` bytes, over the budget: an error of `field` (over_budget_text).
  [[nodiscard]] Status fits(double need, const std::string& what, Field field) const;
  /// ... an error at `where` (a line of a file; a flag of a command's own).
  [[nodiscard]] Status fits(double need, const std::string& what, const std::string& where) const;
  /// ... building `req`'s plan (its quotient's under an active `quotient`) with `extra_bytes_per_op` more an op (a
  /// JSON copy, the simulator's state): an error of --ranks.
  [[nodiscard]] Status fits_plan(const PlanRequest& req, double extra_bytes_per_op, const std::string& what,
                                 const ir::RankSymmetry& quotient = {}) const;
  /// ... a checked request's, by its estimate.
  [[nodiscard]] Status fits_plan(const CheckedRequest& req, double extra_bytes_per_op, const std::string& what,
                                 const ir::RankSymmetry& quotient = {}) const;
};

/// The budget --max-memory's `text` gives: empty, half of this machine's memory ("half of this machine's
/// memory"); else the size given ("--max-memory"), at least 1M.
[[nodiscard]] Expected<MemoryBudget> memory_budget(const std::string& text);

}  // namespace charm::sched
