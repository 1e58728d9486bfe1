#include "tools/run_one.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "tools/cli_support.hpp"

namespace charm::cli {

namespace {
/// A count as people read it in a progress line: 950, 12.3k, 3.9M.
std::string approx(double n) {
  if (n < 1e4) return fmt::format("{:.0f}", n);
  if (n < 1e6) return fmt::format("{:.1f}k", n / 1e3);
  return fmt::format("{:.1f}M", n / 1e6);
}

/// The progress line of a run of `algo` at `p`, `elapsed` seconds in.
std::string progress_text(const std::string& algo, const sim::RunProgress& p, double elapsed) {
  switch (p.stage) {
  case sim::RunProgress::Stage::SolvingChunks:
    return fmt::format("charm: placing the documents' chunks for {}: {} of at most {} chunk maps tried, {:.0f} s", algo,
                       p.done, approx(p.total), elapsed);
  case sim::RunProgress::Stage::Planning:
    return fmt::format("charm: planning {}: {} of about {} ops, {:.0f} s", algo, approx(double(p.done)),
                       approx(p.total), elapsed);
  case sim::RunProgress::Stage::Indexing:
    return fmt::format("charm: preparing the simulation of {}: {} ops, {:.0f} s", algo, approx(p.total), elapsed);
  case sim::RunProgress::Stage::Simulating:
    break;
  }
  return fmt::format("charm: simulating {}: {:.0f}% of {} ops, {:.0f} s", algo,
                     100.0 * double(p.done) / std::max(p.total, 1.0), approx(p.total), elapsed);
}

/// A progress line for a run of `algo`, past its first second.
struct RunProgressLine {
  explicit RunProgressLine(std::string algo) : algo_(std::move(algo)) {}
  void operator()(const sim::RunProgress& p) {
    line_.update([&] { return progress_text(algo_, p, line_.elapsed()); });
  }
  void finish() { line_.finish(); }

 private:
  std::string algo_;
  ProgressLine line_;
};
}  // namespace

Expected<sim::Evaluation> simulate_shown(sim::SimulationRequest r, const topo::Topology& t) {
  // Runs at cluster scale take seconds to minutes: a progress line past the first second.
  RunProgressLine progress(r.plan.algo);
  r.progress = std::ref(progress);
  auto e = sim::simulate_request(r, t);
  progress.finish();
  return e;
}

std::vector<app::CompareRow> run_compare(const app::CompareRequest& r, const topo::Topology& t) {
  return unwrap_run(app::run_compare(r, t, simulate_shown));
}

sim::Evaluation run_simulation(std::optional<ir::Plan> file_plan, const std::string& algo, const ir::Workload& w,
                               const app::Cluster& cluster, const topo::Topology& t, SymmetryUse use,
                               const sim::ChunkSolveOptions& solve) {
  if (file_plan) return unwrap_run(app::simulate_plan_file(std::move(*file_plan), cluster, t));
  RunProgressLine progress(algo);
  auto e = app::simulate_algorithm(algo, w, cluster, t, use, solve, std::ref(progress));
  progress.finish();
  return unwrap_run(std::move(e));
}

}  // namespace charm::cli
