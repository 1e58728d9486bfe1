#include "tools/plan_flags.hpp"

#include <CLI/CLI.hpp>

#include <fmt/ranges.h>

#include <iostream>

#if CHARM_CLI_HAVE_SIM
#include "sim/simulate_request.hpp"
#include "tools/cluster_flags.hpp"
#endif

namespace charm::cli {

void PlanFlags::add(CLI::App& app, bool with_ranks, bool with_plan_file) {
  app_ = &app;
  app.add_option("--algo,-a", algo, fmt::format("{}", fmt::join(sched::algorithm_names(), " | ")))
      ->capture_default_str()
      ->transform(algorithm_name());
  if (with_ranks) {
    app.add_option("--ranks,-n", ranks, "number of ranks (GPUs)")->capture_default_str();
    app.add_option("--domains,-d", domains, "domains (NUMA nodes / servers) the ranks split into")
        ->capture_default_str();
    add_max_memory(app, max_memory);
    app.add_option("--topology,-t", topology,
                   "--layout balanced: the topology JSON whose simulated time the chunk map's solver minimises");
  }
  workload.add(app);
  if (with_plan_file)
    app.add_option("--plan", plan_file,
                   "a plan file (charm plan --out, or hand-edited): its algorithm, ranks and workload apply");
}

sched::PlanRequest PlanFlags::solved_request() const {
  auto req = request();
  if (req.workload.layout != ir::Layout::Balanced) return req;
  if (topology.empty()) fail(app::balanced_needs_topology());
#if CHARM_CLI_HAVE_SIM
  const auto t = load_topology_file(topology, {});
  if (auto s = unwrap(sim::solve_chunks(req, t, workload.solve_options(), budget())))
    std::cerr << fmt::format("charm: chunks on {}: {}\n", t.name, s->line());
  return req;
#else
  fail(Error{Field::Layout, "balanced: its chunk map is solved by simulating candidates, and this build has no "
                            "simulator (configure with -DCHARM_BUILD_SIM=ON)"});
#endif
}

ir::Plan PlanFlags::make(double extra_bytes_per_op, const std::string& what) const {
  if (!from_file()) return unwrap(app::plan_within(solved_request(), budget(), extra_bytes_per_op, what));
  return std::move(proved_file_plan(read_plan_file())).release();
}

ir::ValidatedPlan PlanFlags::make_validated(const std::function<void(const ir::Plan&)>& before_proof) const {
  ir::Plan plan = from_file() ? read_plan_file() : make();
  if (before_proof) before_proof(plan);
  if (from_file()) return proved_file_plan(std::move(plan));
  auto v = sched::validated(std::move(plan));
  if (!v) throw RuntimeFailure{"internal: the planner produced an invalid plan: " + v.error().message()};
  return std::move(v).value();
}

ir::Plan PlanFlags::read_plan_file() const {
  // The file fixes what these flags describe; given with it they would be silently ignored.
  for (const char* f : {"--algo", "--ranks", "--domains", "--batch", "--seq", "--heads", "--kv-heads", "--head-dim",
                        "--dtype", "--causal", "--mask", "--layout", "--pass"})
    if (app_ != nullptr && app_->get_option_no_throw(f) != nullptr && app_->count(f) > 0)
      fail(Error{
          f, fmt::format("the plan file {} fixes the algorithm, ranks and workload; drop {} or --plan", plan_file, f)});
  return unwrap(app::read_plan_file(plan_file, budget()));
}

ir::ValidatedPlan PlanFlags::proved_file_plan(ir::Plan plan) const {
  return unwrap(app::proved_plan_file(std::move(plan), plan_file));
}

}  // namespace charm::cli
