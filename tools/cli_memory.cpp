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

sched::MemoryBudget memory_budget() { return {memory_budget_bytes(), memory_budget_name()}; }

void check_budget(double bytes, const std::string& what, const std::string& flag) {
  unwrap(memory_budget().fits(bytes, what, flag));
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
  unwrap(memory_budget().fits_plan(req, extra_bytes_per_op, what, quotient));
}

}  // namespace charm::cli
