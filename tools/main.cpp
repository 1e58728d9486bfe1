// `charm`: the command line. Thin: parses flags, calls the libraries, prints.
// Each subcommand lives in its own cmd_*.cpp and registers itself.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include "tools/cli_common.hpp"

int main(int argc, char** argv) {
  // An interrupt removes the temporaries of the output being written (cli_common.hpp).
  charm::cli::install_interrupt_cleanup();
  CLI::App app{"charm: plan, validate, simulate and run distributed attention (CHARM+, RM+, Ring, ...)", "charm"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "all subcommands' help");
  for (auto& reg : charm::cli::registry()) reg(app);
  charm::cli::apply_number_grammar(app);
  // CLI11 would say only "A subcommand is required" for a mistyped one.
  const auto subs = app.get_subcommands([](const CLI::App*) { return true; });
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(subs.begin(), subs.end(), [&](const CLI::App* sub) { return sub->check_name(argv[1]); })) {
    std::string names;
    for (const auto* sub : subs) names += fmt::format("{}{}", names.empty() ? "" : ", ", sub->get_name());
    std::fprintf(stderr, "charm: error: unknown command '%s' (expected one of: %s)\n", argv[1], names.c_str());
    return charm::cli::kExitUsage;
  }
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
  } catch (const std::bad_alloc&) {
    // A workload too large for this machine's memory: a runtime failure, not a crash.
    std::fprintf(stderr, "charm: error: out of memory\n");
    return charm::cli::kExitRuntime;
  } catch (const std::exception& e) {
    // Not expected: every input error travels as a charm::Error. One line, never std::terminate's.
    std::fprintf(stderr, "charm: error: internal: %s\n", e.what());
    return charm::cli::kExitRuntime;
  }
  return charm::cli::exit_code();
}
