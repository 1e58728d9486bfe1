#pragma once
// Flags that choose an algorithm and a cluster shape, shared by plan, simulate and run;
// or, for simulate and run, a plan file (`--plan FILE`) that fixes all of them.

#include <fmt/format.h>

#include <fmt/format.h>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {

struct PlanFlags {
  std::string algo = "charm";
  int ranks = 8;
  int domains = 1;
  WorkloadFlags workload;
  std::string plan_file;  // --plan: run or simulate this plan instead of building one
  void add(CLI::App& app, bool with_ranks = true, bool with_plan_file = false) {
    app_ = &app;
    app.add_option("--algo,-a", algo,
                   "ring | ring-zigzag | merge | rm+ | charm | allgather-kv | tasp | tasp-zigzag | ulysses | usp")
        ->capture_default_str()
        ->transform(algorithm_name());
    if (with_ranks) {
      app.add_option("--ranks,-n", ranks, "number of ranks (GPUs)")->capture_default_str();
      app.add_option("--domains,-d", domains, "domains (NUMA nodes / servers) the ranks split into")
          ->capture_default_str();
      add_max_memory(app);
    }
    workload.add(app);
    if (with_plan_file)
      app.add_option("--plan", plan_file,
                     "a plan file (charm plan --out, or hand-edited): its algorithm, ranks and workload apply");
  }
  [[nodiscard]] bool from_file() const { return !plan_file.empty(); }
  [[nodiscard]] sched::PlanRequest request() const {
    if (domains < 1) fail(Error{"--domains", fmt::format("must be >= 1, got {}", domains)});
    sched::PlanRequest r;
    r.algo = algo;
    r.ranks = ranks;
    r.domains = domains;
    r.workload = workload.get();
    return sched::normalised(r);
  }
  /// The plan: built from the flags, or read from --plan and validated (a plan file that
  /// breaks a rule is refused before anything runs on it). A plan that would not fit in the
  /// memory budget, with `extra_bytes_per_op` more per op for what the caller does with it
  /// (a JSON copy), is refused before it is built.
  [[nodiscard]] ir::Plan make(double extra_bytes_per_op = 0, const std::string& what = "the plan") const {
    if (!from_file()) {
      const auto req = request();
      if (auto s = sched::check_request(req); !s) fail(s.error());
      check_plan_budget(req, extra_bytes_per_op, what);
      return unwrap(sched::make_plan(req));
    }
    // The file fixes what these flags describe; given with it they would be silently ignored.
    for (const char* f : {"--algo", "--ranks", "--domains", "--batch", "--seq", "--heads", "--kv-heads", "--head-dim",
                          "--dtype", "--causal", "--mask", "--layout", "--pass"})
      if (app_ != nullptr && app_->get_option_no_throw(f) != nullptr && app_->count(f) > 0)
        fail(Error{f, fmt::format("the plan file {} fixes the algorithm, ranks and workload; drop {} or --plan",
                                  plan_file, f)});
    check_plan_file_budget(plan_file, "--plan");
    ir::Plan plan = unwrap(ir::load_plan(plan_file));
    if (auto rep = sched::validate(plan); !rep.ok())
      fail(Error{"--plan", fmt::format("{} is not a valid plan: {}", plan_file, rep.summary(plan))});
    return plan;
  }

 private:
  CLI::App* app_ = nullptr;
};

}  // namespace charm::cli
