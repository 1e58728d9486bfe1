// The memory budget (--max-memory) and the checks of work against it before it starts.
#include "tools/cli_common.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "scheduler/planners/planners.hpp"

namespace charm::cli {

namespace {
std::string& max_memory_text() {
  static std::string text;
  return text;
}
}  // namespace

void add_max_memory(CLI::App& app) {
  app.add_option(
      "--max-memory", max_memory_text(),
      "refuse work estimated to need more memory than this (4G, 512M; default: half of this machine's memory)");
}

double memory_budget_bytes() {
  if (!max_memory_text().empty()) {
    const auto v = unwrap(parse_size(max_memory_text(), "--max-memory"));
    if (v < (1 << 20)) fail(Error{"--max-memory", fmt::format("must be at least 1M, got {}", max_memory_text())});
    return double(v);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? 0.5 * double(pages) * double(page) : 8e9;
}

std::string memory_budget_name() {
  return max_memory_text().empty() ? "half of this machine's memory" : "--max-memory";
}

void check_budget(double bytes, const std::string& what, const std::string& flag) {
  const double budget = memory_budget_bytes();
  if (bytes <= budget) return;
  fail(Error{flag, sched::over_budget_text(what, bytes, budget, memory_budget_name())});
}

void check_plan_file_budget(const std::string& path, const std::string& flag) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return;  // the loader says what is wrong with the path
  // A plan file holds about 270 bytes of text an op (measured: a 64-rank ring, 12,160 ops in 3.3 MB); reading
  // one takes the text, nlohmann's tree and the plan, about 2 kB an op in all (the JSON copy charm plan
  // budgets), and a simulation of it kSimBytesPerOp more.
  const double ops = double(size) / 270;
  check_budget(ops * (2000 + sched::kSimBytesPerOp),
               fmt::format("reading the plan file {} ({:.3g} MB, about {:.2g} ops)", path, double(size) / 1e6, ops),
               flag);
}

void check_plan_budget(const sched::PlanRequest& req, double extra_bytes_per_op, const std::string& what,
                       const ir::RankSymmetry& quotient) {
  if (!quotient.active()) {
    const auto e = sched::estimate_plan(req);
    check_budget(e.plan_bytes + extra_bytes_per_op * e.ops,
                 fmt::format("{} ({} on {} ranks: about {:.2g} ops)", what, req.algo, req.ranks, e.ops), "--ranks");
    return;
  }
  // The planner still describes every rank: its buffers on the other ranks (phantoms) are the bulk.
  const auto e = sched::estimate_quotient_plan(req, quotient);
  check_budget(e.plan_bytes + extra_bytes_per_op * e.ops,
               fmt::format("{} of one class of {} rank{} ({} on {} ranks: about {:.2g} ops, and {:.2g} buffers of the "
                           "other ranks)",
                           what, quotient.block, quotient.block == 1 ? "" : "s", req.algo, req.ranks, e.ops,
                           e.phantom_buffers),
               "--ranks");
}

}  // namespace charm::cli
