#pragma once
// Shared pieces of the `charm` command line: the subcommand registry, workload flags, the number grammar on every
// numeric flag (support/number_text.hpp), algorithm names; and, through tools/cli_support.hpp, the error path,
// output files and progress lines it shares with the Python module.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/chunk_solver.hpp"
#include "support/enum_names.hpp"
#include "support/expected.hpp"
#include "support/number_text.hpp"
#include "tools/app/workload.hpp"
#include "tools/cli_support.hpp"

// CLI11's types by name only: the files that define options include <CLI/CLI.hpp> (about 10 s of
// compile time per file at -O3), the report and test files that include this one do not.
namespace CLI {
class App;
class Option;
class Validator;
}  // namespace CLI

namespace charm::cli {

/// --max-memory on `app`, into `text` (the command's own flags hold it; the budget: memory_budget).
void add_max_memory(CLI::App& app, std::string& text);

/// A CLI11 transform for --algo: the canonical name of an algorithm given in any case;
/// an unknown one fails with the nearest name and the list.
[[nodiscard]] CLI::Validator algorithm_name();
/// --algos: each name resolved as by algorithm_name(); an empty list is an error of `field`.
[[nodiscard]] std::vector<std::string> algorithm_list(const std::string& text, Field field = Field::Algos);

/// Puts check_number on every numeric option of `app` and its subcommands, by
/// the type each option converts to, so that no flag can escape the grammar.
void apply_number_grammar(CLI::App& app);

/// The workload flags shared by plan, simulate, compare and run.
struct WorkloadFlags : app::WorkloadSpec {
  double solve_ms = sim::ChunkSolveOptions{}.budget_ms;      // --solve-ms: the balanced layout's solver's time budget
  std::uint64_t solve_seed = sim::ChunkSolveOptions{}.seed;  // --solve-seed
  void add(CLI::App& app, bool with_pass = true);
  [[nodiscard]] sim::ChunkSolveOptions solve_options() const;
};

/// Subcommands register themselves here (one file each under tools/): the name of the subcommand that `add` sets
/// up on the app, and `add`. A start sets up only the subcommand it names (the options of all of them took a
/// quarter of a start under AddressSanitizer); help, --help-all and an unknown name set up every one.
using Register = std::function<void(CLI::App&)>;
struct Registration {
  std::string name;
  Register add;
};
std::vector<Registration>& registry();
struct Registrar {
  Registrar(std::string name, Register add) { registry().push_back({std::move(name), std::move(add)}); }
};

}  // namespace charm::cli
