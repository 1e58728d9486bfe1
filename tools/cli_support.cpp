// The error path and exit code, the warning line, the mpirun job this process is in, and the memory budget.
#include "tools/cli_support.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "tools/app/plans.hpp"

namespace charm::cli {

void fail(Error e) { throw UsageError{std::move(e)}; }

void print_warning(const std::string& what) { std::cerr << "charm: warning: " << what << "\n"; }
int& exit_code() {
  static int code = 0;
  return code;
}

std::optional<LaunchedJob> launched_job() {
  // Open MPI's mpirun, then MPICH's Hydra (PMI) and PMIx launchers.
  for (auto [rank_var, size_var] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                    std::pair{"PMI_RANK", "PMI_SIZE"}, std::pair{"PMIX_RANK", "PMIX_SIZE"}}) {
    const char* r = std::getenv(rank_var);
    const char* n = std::getenv(size_var);
    if (r == nullptr || n == nullptr) continue;
    char* end = nullptr;
    const long rank = std::strtol(r, &end, 10);
    if (end == r || *end != 0) continue;
    const long size = std::strtol(n, &end, 10);
    if (end == n || *end != 0 || size < 1 || rank < 0 || rank >= size) continue;
    return LaunchedJob{int(rank), int(size)};
  }
  return std::nullopt;
}

EarlyFailure& early_failure_handler() {
  static EarlyFailure handler;
  return handler;
}

bool quiet_rank() {
  const auto job = launched_job();
  return job && job->size > 1 && job->rank > 0;
}

sched::MemoryBudget memory_budget(const std::string& text) { return unwrap(sched::memory_budget(text)); }

void check_budget(const sched::MemoryBudget& budget, double bytes, const std::string& what, const std::string& flag) {
  unwrap(budget.fits(bytes, what, flag));
}

void check_plan_file_budget(const sched::MemoryBudget& budget, const std::string& path, const std::string& flag) {
  unwrap(app::fits_plan_file(budget, path, flag));
}

}  // namespace charm::cli
