#pragma once
// Shared pieces of the `charm` command line: workload flags, size parsing,
// atomic output files, and the one error path (exit code 2 for bad input).

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/ir/expected.hpp"
#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/planners.hpp"

namespace charm::cli {

inline constexpr int kExitInvalid = 1;   // a plan that fails validation / a check that fails
inline constexpr int kExitUsage = 2;     // bad input: flags, files, values
inline constexpr int kExitRuntime = 3;   // a stall, an MPI/CUDA/NCCL failure

/// Thrown inside a subcommand to leave through the single error path.
struct UsageError {
  Error error;
};
[[noreturn]] void fail(Error e);
/// Thrown for runtime failures (exit code 3): a stall, an MPI/CUDA/NCCL error.
struct RuntimeFailure {
  std::string message;
};
/// The exit code a subcommand leaves for main (0 unless set).
int& exit_code();
template <class T>
T unwrap(Expected<T> e) {
  if (!e) fail(e.error());
  return std::move(e).value();
}
inline void unwrap(const Status& s) {
  if (!s) fail(s.error());
}

/// "4096", "128k", "1M", "2g" (powers of 1024) -> value; errors name the flag.
[[nodiscard]] Expected<std::int64_t> parse_size(const std::string& text, const std::string& flag);

/// The process's place in a job started by mpirun (Open MPI's or MPICH's launcher
/// environment), read before MPI is initialised; nullopt outside such a job.
struct LaunchedJob {
  int rank = 0, size = 1;
};
[[nodiscard]] std::optional<LaunchedJob> launched_job();
/// True in every process of a launched job but the first: usage errors, the same
/// on every rank, are printed once, by rank 0.
[[nodiscard]] bool quiet_rank();

/// Work that would not fit is refused before it starts, with its estimate: the budget is
/// --max-memory (commands that build plans take it) or half of this machine's memory.
void add_max_memory(CLI::App& app);
[[nodiscard]] double memory_budget_bytes();
/// Fails naming `flag` when `bytes` (an estimate of `what`) exceeds the budget.
void check_budget(double bytes, const std::string& what, const std::string& flag);
/// check_budget for building (and, per op, `extra_bytes_per_op` more: a JSON copy, simulator state) this plan.
void check_plan_budget(const sched::PlanRequest& req, double extra_bytes_per_op, const std::string& what);

/// A CLI11 transform for --algo: the canonical name of an algorithm given in any case;
/// an unknown one fails with the nearest name and the list.
[[nodiscard]] CLI::Validator algorithm_name();
/// --algos: each name resolved as by algorithm_name(); an empty list is an error of `flag`.
[[nodiscard]] std::vector<std::string> algorithm_list(const std::string& text, const std::string& flag = "--algos");

/// "a, b,,c" -> {"a", "b", "c"}: comma-separated items, spaces and empty items dropped.
[[nodiscard]] std::vector<std::string> split_list(const std::string& s);

/// The workload flags shared by plan, simulate, compare and run.
struct WorkloadFlags {
  std::string batch = "1", seq = "4k", heads = "8", kv_heads, head_dim = "128";
  std::string dtype = "bf16", layout = "contiguous", pass = "fwd";
  bool causal = false;
  void add(CLI::App& app, bool with_pass = true);
  [[nodiscard]] ir::Workload get() const;
};

/// Fails now, before any work or any other output, when `path` cannot be written:
/// its folder is missing or read-only, or it is itself a folder. `flag` names the option.
void check_output_path(const std::string& path, const std::string& flag);

/// Writes `content` to `path` through a temporary file and a rename, so a
/// failed or interrupted run leaves the old file or none.
void write_file_atomic(const std::string& path, const std::string& content);

/// Subcommands register themselves here (one file each under tools/).
using Register = std::function<void(CLI::App&)>;
std::vector<Register>& registry();
struct Registrar {
  explicit Registrar(Register r) { registry().push_back(std::move(r)); }
};

} // namespace charm::cli
