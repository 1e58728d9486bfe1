#pragma once
// `charm advise` from a cluster value and its own arguments to its report, shared by the command and the Python
// module:
//
//   app::Cluster, AdviseArgs --advise_request--> AdviseRequest --run_advise--> sim::Advice
//         --advice_json / print_advice--> report
//
// Errors are values: the arguments' (ErrorKind::Input) are the user's; a simulator failure is RunFailed.

#include <nlohmann/json.hpp>

#include <iosfwd>
#include <string>

#include "scheduler/ir/workload.hpp"
#include "sim/advise.hpp"
#include "tools/app/cluster.hpp"
#include "topologies/topology.hpp"

namespace charm::app {

/// What advise's own flags (the Python module's arguments) say, beside the workload's and the cluster's.
struct AdviseArgs {
  std::string algos;              // --algos: comma-separated (empty: every algorithm)
  bool pass_given = false;        // --pass given: rank by that pass (default: fwd+bwd)
  bool layout_given = false;      // --layout given: only that layout's candidates
  int jobs = 0;                   // --jobs (0: the machine's cores)
  std::string tp_search;          // --tp-search: comma-separated TP sizes
  int layers = 1;                 // --layers: times for a model of this many attention layers
  double tie_percent = 10;        // --tie: candidates within this many percent of the best are ties
  bool runnable = false;          // --runnable: only candidates a framework runs
  sim::ChunkSolveOptions chunks;  // --solve-ms, --solve-seed: the balanced layout's solver
};

/// Default of --tie: the model's error on ratios of times (the speedup error of the calibrated
/// H100 preset against the paper's measurements, docs/validation.md), in percent.
inline constexpr double kDefaultTiePercent = 10;

struct AdviseRequest {
  ir::Workload workload;
  sim::AdviseOptions options;
  int layers = 1;
  double tie_percent = kDefaultTiePercent;
  double reserved_gb = 0;
};

/// Checks advise's arguments against the topology and gathers them into a request.
[[nodiscard]] Expected<AdviseRequest> advise_request(ir::Workload w, const Cluster& cluster, const topo::Topology& t,
                                                     const AdviseArgs& f);

/// Runs the request: at least one candidate, or an error naming the first refusal.
[[nodiscard]] Expected<sim::Advice> run_advise(const AdviseRequest& r, const topo::Topology& t);

/// Candidates within the request's tie tolerance of the fastest: the model cannot order them.
[[nodiscard]] bool is_tie(const AdviseRequest& r, const sim::Advice& adv, const sim::Candidate& c);

/// The `advise --json` document (the Python module's advise returns it as a dict).
[[nodiscard]] nlohmann::json advice_json(const AdviseRequest& r, const sim::Advice& adv, const topo::Topology& t);

/// The text table with the best candidate's reasons, frameworks' settings and refusals; `top` rows (0: all).
void print_advice(std::ostream& os, const AdviseRequest& r, const sim::Advice& adv, const topo::Topology& t, int top);

}  // namespace charm::app
