// The subcommand registry, --max-memory, and algorithm names.
#include "tools/cli_common.hpp"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "scheduler/planners/planners.hpp"

namespace charm::cli {

std::vector<Registration>& registry() {
  static std::vector<Registration> r;
  return r;
}

CLI::Validator algorithm_name() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        auto a = sched::resolve_algorithm(s);
        if (!a) return a.error().what;
        s = *a;
        return {};
      },
      "ALGO", "algorithm");
}

void add_max_memory(CLI::App& app, std::string& text) {
  app.add_option(
      "--max-memory", text,
      "refuse work estimated to need more memory than this (4G, 512M; default: half of this machine's memory)");
}

std::vector<std::string> algorithm_list(const std::string& text, Field field) {
  return unwrap(sched::resolve_algorithms(text, field));
}

}  // namespace charm::cli
