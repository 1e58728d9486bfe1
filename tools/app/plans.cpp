#include "tools/app/plans.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <utility>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"

namespace charm::app {

Expected<sched::PlanRequest> plan_request(const std::string& algo, int ranks, int domains, const WorkloadSpec& w) {
  if (domains < 1) return Error{"--domains", fmt::format("must be >= 1, got {}", domains)};
  sched::PlanRequest r;
  r.algo = algo;
  r.ranks = ranks;
  r.domains = domains;
  CHARM_TRY_ASSIGN(r.workload, w.get());
  if (auto s = w.check_layout_for(algo, r.workload); !s) return s.error();
  return sched::normalised(r);
}

Error balanced_needs_topology() {
  return Error{"--topology", "--layout balanced solves its chunk map for the least simulated time on a topology: "
                             "give --topology FILE (presets in topologies/)"};
}

Expected<ir::Plan> plan_within(const sched::PlanRequest& req, const sched::MemoryBudget& budget,
                               double extra_bytes_per_op, const std::string& what) {
  CHARM_TRY_LET(checked, sched::CheckedRequest::check(req));
  if (auto s = budget.fits_plan(checked.get(), extra_bytes_per_op, what); !s) return s.error();
  return sched::make_plan(checked);
}

Status fits_plan_file(const sched::MemoryBudget& budget, const std::string& path, const std::string& flag) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return {};  // the loader says what is wrong with the path
  // A plan file holds about 270 bytes of text an op (measured: a 64-rank ring, 12,160 ops in 3.3 MB); reading
  // one takes the text, nlohmann's tree and the plan, about 2 kB an op in all (the JSON copy charm plan
  // budgets), and a simulation of it kSimBytesPerOp more.
  const double ops = double(size) / 270;
  return budget.fits(
      ops * (2000 + sched::kSimBytesPerOp),
      fmt::format("reading the plan file {} ({:.3g} MB, about {:.2g} ops)", path, double(size) / 1e6, ops), flag);
}

Expected<ir::Plan> read_plan_file(const std::string& path, const sched::MemoryBudget& budget) {
  if (auto s = fits_plan_file(budget, path, "--plan"); !s) return s.error();
  return ir::load_plan(path);
}

Expected<ir::ValidatedPlan> proved_plan_file(ir::Plan plan, const std::string& path) {
  auto v = sched::validated(std::move(plan));
  if (!v) return Error{"--plan", fmt::format("{} is not a valid plan: {}", path, v.error().message())};
  return v;
}

}  // namespace charm::app
