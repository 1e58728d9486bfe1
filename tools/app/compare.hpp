#pragma once
// `charm compare` from a cluster value to its report, shared by the command and the Python module:
//
//   app::Cluster, workload --compare_request--> CompareRequest --run_compare--> CompareRow per (pass, algorithm)
//         --compare_json / compare_rows_json / print_compare--> report
//
// Every algorithm asked for runs each pass on one context-parallel group, a hand-placed group
// (--gpus) or every CP group of a --cp / --tp layout; an algorithm its planner refuses is a row
// with the reason. Errors are values: a refused request ErrorKind::Input, a failed simulation RunFailed.

#include <nlohmann/json.hpp>

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/layout.hpp"
#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "sim/report.hpp"
#include "tools/app/cluster.hpp"
#include "tools/app/simulation.hpp"
#include "topologies/topology.hpp"

namespace charm::app {

struct CompareRequest {
  ir::Workload workload;  // pass Both unless asked; zigzag under a causal mask unless a layout is given
  std::vector<std::string> algos;
  std::vector<ir::PassKind> passes;
  int ranks = 0, domains = 1;
  std::optional<sched::Layout> layout;  // every CP group at once
  bool attention_block = false;         // a --tp given: whole attention blocks (sim/tensor_parallel.hpp)
  std::vector<std::int32_t> gpus;       // one group placed by hand
  double reserved_gb = 0;
  bool uniform = false;
  sched::MemoryBudget budget;  // each simulation's (the cluster flags' --max-memory)
};

/// `algos`: comma-separated (empty: every algorithm); `pass_given` / `layout_given`: whether the
/// flags named them (compare shows both passes, and the balanced layout under a causal mask).
[[nodiscard]] Expected<CompareRequest> compare_request(ir::Workload w, const Cluster& cluster, const topo::Topology& t,
                                                       const std::string& algos, bool pass_given, bool layout_given);

struct CompareRow {
  std::string algo, pass, layout;
  std::string note;  // the planner's refusal (ok false)
  bool ok = false;
  sim::Summary s;
  sim::ClosedForm f;
  sim::Bottleneck b;
  sim::MemoryVerdict m;
  std::optional<sim::TpBlockCost> tp;  // with CompareRequest::attention_block: in s.time_s
};

/// How compare runs one simulation: sim::simulate_request, or the caller's way of it (a progress line around it).
using SimulateFn = std::function<Expected<sim::Evaluation>(sim::SimulationRequest, const topo::Topology&)>;

/// Runs every (pass, algorithm) through `simulate`: at least one row ok, or an error with the first refusal.
[[nodiscard]] Expected<std::vector<CompareRow>> run_compare(const CompareRequest& r, const topo::Topology& t,
                                                            const SimulateFn& simulate = sim::simulate_request);

/// The `compare --json` document.
[[nodiscard]] nlohmann::json compare_json(const CompareRequest& r, const std::vector<CompareRow>& rows,
                                          const topo::Topology& t);
/// One flat row per (algorithm, pass) with the same keys in each (None/null where a value does not
/// apply): what the Python module returns, a table pandas takes as it is.
[[nodiscard]] nlohmann::json compare_rows_json(const CompareRequest& r, const std::vector<CompareRow>& rows,
                                               const topo::Topology& t);
/// The text table and the best line.
void print_compare(std::ostream& os, const CompareRequest& r, const std::vector<CompareRow>& rows,
                   const topo::Topology& t);

}  // namespace charm::app
