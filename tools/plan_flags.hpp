#pragma once
// Flags that choose an algorithm and a cluster shape, shared by plan, simulate and run.

#include <fmt/format.h>

#include "scheduler/ir/plan.hpp"
#include "scheduler/planners/planners.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {

struct PlanFlags {
  std::string algo = "charm";
  int ranks = 8;
  int domains = 1;
  WorkloadFlags workload;
  void add(CLI::App& app, bool with_ranks = true) {
    app.add_option("--algo,-a", algo, "ring | ring-zigzag | merge | rm+ | charm | allgather-kv | tasp | tasp-zigzag | ulysses | usp")->capture_default_str();
    if (with_ranks) {
      app.add_option("--ranks,-n", ranks, "number of ranks (GPUs)")->capture_default_str();
      app.add_option("--domains,-d", domains, "domains (NUMA nodes / servers) the ranks split into")->capture_default_str();
    }
    workload.add(app);
  }
  [[nodiscard]] sched::PlanRequest request() const {
    if (domains < 1) fail(Error{"--domains", fmt::format("must be >= 1, got {}", domains)});
    sched::PlanRequest r;
    r.algo = algo;
    r.ranks = ranks;
    r.domains = domains;
    r.workload = workload.get();
    return sched::normalised(r);
  }
  [[nodiscard]] ir::Plan make() const { return unwrap(sched::make_plan(request())); }
};

} // namespace charm::cli
