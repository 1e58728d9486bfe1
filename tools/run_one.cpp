#include "tools/run_one.hpp"

#include <fmt/format.h>

#include "sim/simulator.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {

namespace {
/// Full plans at least this large are simulated by their quotient under `--symmetry auto`: below,
/// every rank's ops are kept (traces and critical paths name every rank) and the run is quick anyway.
constexpr double kQuotientFromOps = 1 << 20;
}  // namespace

ir::RankSymmetry quotient_for(const sched::PlanRequest& req, const topo::Topology& t, SymmetryUse use) {
  if (use == SymmetryUse::Off) return {};
  const ir::RankSymmetry plan_sym = sched::plan_symmetry(req);
  const auto q =
      plan_sym.active()
          ? sim::topology_quotient(plan_sym, t, req.ranks)
          : Expected<ir::RankSymmetry>(Error{"", fmt::format("{} has no rank symmetry on this workload (a causal "
                                                             "mask breaks every one but usp's on zigzag)",
                                                             req.algo)});
  if (use == SymmetryUse::On && !q)
    fail(Error{"--symmetry", fmt::format("cannot simulate one class of ranks for all: {}", q.error().message())});
  if (!q || (use == SymmetryUse::Auto && sched::estimate_plan(req).ops < kQuotientFromOps)) return {};
  return *q;
}

sim::Evaluation run_one(const std::string& algo, const ir::Workload& w, const topo::Topology& t, int domains, int ranks,
                        SymmetryUse use) {
  const auto req = sim::normalised_request({algo, w, ranks, domains});
  if (auto s = sched::check_request(req); !s) fail(s.error());
  const ir::RankSymmetry q = quotient_for(req, t, use);
  // The simulator keeps times and state per op: about 30 bytes an op beside the plan (measured:
  // 148 bytes an op in all for a 3.1M-op ring, 123 for a 2.1M-op charm); 60 leaves a margin.
  check_plan_budget(req, 60, "the simulation", q);
  ir::Plan plan = unwrap(sched::make_plan(req, q));
  auto r = sim::evaluate_plan(std::move(plan), t);
  if (!r) throw RuntimeFailure{r.error().message()};
  return std::move(r).value();
}

}  // namespace charm::cli
