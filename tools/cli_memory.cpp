// The memory budget (--max-memory) and the checks of work against it before it starts.
#include "tools/cli_common.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "scheduler/planners/planners.hpp"

namespace charm::cli {

void add_max_memory(CLI::App& app, std::string& text) {
  app.add_option(
      "--max-memory", text,
      "refuse work estimated to need more memory than this (4G, 512M; default: half of this machine's memory)");
}

sched::MemoryBudget memory_budget(const std::string& text) { return unwrap(sched::memory_budget(text)); }

void check_budget(const sched::MemoryBudget& budget, double bytes, const std::string& what, const std::string& flag) {
  unwrap(budget.fits(bytes, what, flag));
}

void check_plan_file_budget(const sched::MemoryBudget& budget, const std::string& path, const std::string& flag) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return;  // the loader says what is wrong with the path
  // A plan file holds about 270 bytes of text an op (measured: a 64-rank ring, 12,160 ops in 3.3 MB); reading
  // one takes the text, nlohmann's tree and the plan, about 2 kB an op in all (the JSON copy charm plan
  // budgets), and a simulation of it kSimBytesPerOp more.
  const double ops = double(size) / 270;
  check_budget(budget, ops * (2000 + sched::kSimBytesPerOp),
               fmt::format("reading the plan file {} ({:.3g} MB, about {:.2g} ops)", path, double(size) / 1e6, ops),
               flag);
}

}  // namespace charm::cli
