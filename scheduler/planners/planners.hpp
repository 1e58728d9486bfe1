#pragma once
// The planners: compile an algorithm, a workload and a cluster shape into a plan.

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::sched {

struct PlanRequest {
  std::string algo;
  ir::Workload workload;
  int ranks = 8;
  int domains = 1;  // ranks = domains x ranks_per_domain
};

/// Names of every algorithm, in the order reports list them.
[[nodiscard]] const std::vector<std::string>& algorithm_names();
/// The algorithm's canonical name, for a name given in any case ("Ring" is ring); an
/// unknown name is an error of `flag` that suggests the nearest name and lists them all.
[[nodiscard]] Expected<std::string> resolve_algorithm(std::string_view name, const std::string& flag = "--algo");
/// What building a plan would cost, known before building it: op count and the plan's
/// memory. The op counts are ~c x ranks^2 (each rank meets every other rank's shard), with
/// c measured per algorithm and pass on 32-rank plans and rounded up; TASP multiplies by
/// its part count. An estimate, for refusing up front what would not fit, never for sizing.
struct PlanEstimate {
  double ops = 0;
  double plan_bytes = 0;  // ops, dependencies and buffers in memory (about 120 bytes an op, measured 1024-rank ring)
};
[[nodiscard]] PlanEstimate estimate_plan(const PlanRequest& req);
/// Whether the algorithm's schedule depends on PlanRequest::domains (charm, usp); the others ignore it.
[[nodiscard]] bool uses_domains(const std::string& algo);
/// Whether the algorithm plans a backward pass (TASP is forward only).
[[nodiscard]] bool has_backward(const std::string& algo);
/// The request as the planner runs it: the -zigzag variants always run on the zigzag layout.
[[nodiscard]] PlanRequest normalised(PlanRequest req);
/// Checks that the algorithm can plan this request (rank count, domains, workload).
[[nodiscard]] Status check_request(const PlanRequest& req);
/// Builds the plan; errors (exit code 2 material) name the flag at fault.
[[nodiscard]] Expected<ir::Plan> make_plan(const PlanRequest& req);

}  // namespace charm::sched
