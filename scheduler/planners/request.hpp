#pragma once
// A request to the planner (PlanRequest), its algorithm's name resolved, and the request checked once
// (CheckedRequest): what every later stage (the estimates, the symmetry, the plan) takes as given.

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/planners/estimate.hpp"

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
[[nodiscard]] Expected<std::string> resolve_algorithm(std::string_view name, Field field = Field::Algo);
/// A comma-separated list of algorithm names ("ring, CHARM"), each resolved as by resolve_algorithm, each once, in
/// the order given; an empty list is an error of `field`.
[[nodiscard]] Expected<std::vector<std::string>> resolve_algorithms(const std::string& text,
                                                                    Field field = Field::Algos);
/// Whether the algorithm's schedule depends on PlanRequest::domains (charm, usp); the others ignore it.
[[nodiscard]] bool uses_domains(const std::string& algo);
/// Whether the algorithm plans a backward pass (TASP is forward only).
[[nodiscard]] bool has_backward(const std::string& algo);
/// The request as the planner runs it: the -zigzag variants always run on the zigzag layout; Ulysses and
/// USP over more ranks than KV heads with each KV head repeated (replicated_kv_heads).
[[nodiscard]] PlanRequest normalised(PlanRequest req);
/// The KV heads the planner runs with: the workload's, or, where a head-splitting algorithm (Ulysses, USP)
/// spreads fewer KV heads than ranks over its all-to-all and the query heads still divide, one per rank (each
/// KV head repeated, as DeepSpeed-Ulysses and Megatron-LM do; the copies travel and are held).
[[nodiscard]] std::int64_t replicated_kv_heads(const PlanRequest& req);
/// The counts every request needs: ranks in [1, 2^20], and domains that divide them.
[[nodiscard]] Status check_ranks(int ranks, int domains);
/// Checks that the algorithm can plan this request (rank count, domains, workload).
[[nodiscard]] Status check_request(const PlanRequest& req);

/// A request as the planner runs it (normalised) that the planner accepts (check_request), with its
/// algorithm's row and its plan's estimate, found once. Only `check` makes one, so the stages that take one
/// (the memory budget, plan_symmetry, make_plan) neither normalise, check nor look its algorithm up again.
class CheckedRequest {
 public:
  /// `req` normalised, or why its algorithm cannot plan it.
  [[nodiscard]] static Expected<CheckedRequest> check(PlanRequest req);
  [[nodiscard]] const PlanRequest& get() const { return req_; }
  const PlanRequest* operator->() const { return &req_; }
  /// The algorithm table's row of the request's algorithm.
  [[nodiscard]] const Algorithm& algorithm() const { return *algorithm_; }
  /// What building its full plan costs (estimate_plan).
  [[nodiscard]] const PlanEstimate& estimate() const { return estimate_; }

 private:
  CheckedRequest(PlanRequest req, const Algorithm& a, const PlanEstimate& e)
      : req_(std::move(req)), algorithm_(&a), estimate_(e) {}
  PlanRequest req_;
  const Algorithm* algorithm_;
  PlanEstimate estimate_;
};

}  // namespace charm::sched
