#pragma once
// Extra backends of `charm run` (the GPU ones live in cmd_run_cuda.cpp and are
// compiled only when runtime/cuda is built). A backend adds its own flags to
// the `run` subcommand and gets the parsed common options plus a report
// function that checks, prints and dumps exactly as the CPU backends do.

#include <nlohmann/json.hpp>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "runtime/executor.hpp"
#include "support/enum_names.hpp"
#include "tools/plan_flags.hpp"

// CLI11's types by name only: the files that define options include <CLI/CLI.hpp> (about 10 s of
// compile time per file at -O3), the report and test files that include this one do not.
namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace charm::cli {

/// Where `charm run` executes a plan. Threads and MPI are always built; the GPU ones register
/// themselves when the CUDA toolkit was found.
enum class Backend { Threads, Mpi, CudaLocal, Cuda };
inline constexpr EnumName<Backend> kBackendNames[] = {
    {"threads", Backend::Threads}, {"mpi", Backend::Mpi}, {"cuda-local", Backend::CudaLocal}, {"cuda", Backend::Cuda}};

struct RunRequest {
  const PlanFlags* plan = nullptr;
  Backend backend = Backend::Threads;
  std::uint64_t seed = 0;
  bool check = false, json = false;
  rt::Faults faults;  // --inject-*: testing
  double timeout_s = 0;
  std::string trace;  // --trace FILE: the measured ops as a Chrome trace
  /// Checks against the reference (when asked), prints text or JSON (`extra` merged into
  /// the JSON object, `extra_text` printed as-is before the summary line), dumps; returns the exit code.
  std::function<int(const ir::Plan&, const rt::GlobalTensors& in, const rt::RunResult&, const nlohmann::json& extra,
                    const std::string& extra_text)>
      report;
};

struct RunBackend {
  std::vector<std::string> names;
  std::function<void(CLI::App& run)> add_flags;
  std::function<int(const RunRequest&)> run;  // the exit code; throws UsageError / RuntimeFailure like the rest
  std::function<FlagPaths()> outputs;         // the files its own flags write, besides --trace and --dump
};

inline std::vector<RunBackend>& run_backends() {
  static std::vector<RunBackend> b;
  return b;
}

}  // namespace charm::cli
