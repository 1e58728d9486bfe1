// `charm`: the command line. Thin: parses flags, calls the libraries, prints.
// Each subcommand lives in its own cmd_*.cpp and registers itself.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "tools/cli_common.hpp"

int main(int argc, char** argv) {
  CLI::App app{"charm: plan, validate, simulate and run distributed attention (CHARM+, RM+, Ring, ...)", "charm"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "all subcommands' help");
  for (auto& reg : charm::cli::registry()) reg(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.empty()) what = e.get_name();
    std::fprintf(stderr, "charm: error: %s\n", what.c_str());
    return charm::cli::kExitUsage;
  } catch (const charm::cli::UsageError& e) {
    std::fprintf(stderr, "charm: error: %s\n", e.error.message().c_str());
    return charm::cli::kExitUsage;
  } catch (const charm::cli::RuntimeFailure& e) {
    std::fprintf(stderr, "charm: error: %s\n", e.message.c_str());
    return charm::cli::kExitRuntime;
  }
  return charm::cli::exit_code();
}
