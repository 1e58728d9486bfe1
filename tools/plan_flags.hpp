#pragma once
// Flags that choose an algorithm and a cluster shape, shared by plan, simulate and run;
// or, for simulate and run, a plan file (`--plan FILE`) that fixes all of them.

#include <fmt/format.h>

#include <functional>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"
#include "tools/app/plans.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {

struct PlanFlags {
  std::string algo = std::string(sched::default_algorithm());
  int ranks = app::kDefaultRanks;
  int domains = app::kDefaultDomains;
  WorkloadFlags workload;
  std::string plan_file;  // --plan: run or simulate this plan instead of building one
  std::string topology;   // plan, run: --topology, where --layout balanced's chunk map is solved
  // --max-memory where these flags add it (with ranks); a command whose cluster flags add it copies
  // theirs here before it makes a plan.
  std::string max_memory;
  [[nodiscard]] sched::MemoryBudget budget() const { return memory_budget(max_memory); }
  void add(CLI::App& app, bool with_ranks = true, bool with_plan_file = false);
  [[nodiscard]] bool from_file() const { return !plan_file.empty(); }
  [[nodiscard]] sched::PlanRequest request() const { return unwrap(app::plan_request(algo, ranks, domains, workload)); }
  /// The request with its chunk map solved on --topology where its layout is balanced (the solution's line on
  /// stderr); refused without a topology.
  [[nodiscard]] sched::PlanRequest solved_request() const;
  /// The plan: built from the flags, or read from --plan and validated (a plan file that
  /// breaks a rule is refused before anything runs on it). A plan that would not fit in the
  /// memory budget, with `extra_bytes_per_op` more per op for what the caller does with it
  /// (a JSON copy), is refused before it is built.
  [[nodiscard]] ir::Plan make(double extra_bytes_per_op = 0, const std::string& what = "the plan") const;
  /// The plan to run, proved (what the executors take): a --plan file that breaks a rule is --plan's error
  /// (exit 2), a plan of the planner's that does is an internal one (exit 3). `before_proof`, if given, sees
  /// the plan first (a run too large for the machine is refused before the validator spends memory on it).
  [[nodiscard]] ir::ValidatedPlan make_validated(const std::function<void(const ir::Plan&)>& before_proof = {}) const;

 private:
  /// The --plan file read (its flags and memory checked), not yet proved.
  [[nodiscard]] ir::Plan read_plan_file() const;
  [[nodiscard]] ir::ValidatedPlan proved_file_plan(ir::Plan plan) const;
  CLI::App* app_ = nullptr;
};

}  // namespace charm::cli
