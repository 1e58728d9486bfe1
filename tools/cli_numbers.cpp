// The one grammar of numbers (support/number_text.hpp) on every numeric flag of the command line.
#include "tools/cli_common.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace charm::cli {

void apply_number_grammar(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    // CLI11 names the type an option converts to: INT, UINT, FLOAT (TEXT, ... for the rest).
    static constexpr EnumName<std::optional<NumberKind>> kTypes[] = {{"TEXT", std::nullopt},
                                                                     {"INT", NumberKind::Integer},
                                                                     {"UINT", NumberKind::Unsigned},
                                                                     {"FLOAT", NumberKind::Real}};
    std::string type = opt->get_type_name();
    const auto typed = parse_enum(type.substr(0, type.find(':')), kTypes);
    if (!typed) continue;  // a type of its own: CLI11 checks it
    if (!*typed) {
      // An empty path reads as "not given" further on: `--trace ""` would write nothing, exit 0.
      opt->check(CLI::Validator(
          [](const std::string& value) {
            return value.empty() ? std::string("an empty value: give the flag a value, or leave it out")
                                 : std::string{};
          },
          ""));
      continue;
    }
    const NumberKind kind = **typed;
    opt->transform(CLI::Validator(
        [kind](std::string& value) {
          auto checked = check_number(value, kind);
          if (!checked) return checked.error().what;
          value = std::move(*checked);
          return std::string{};
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apply_number_grammar(*sub);
}

}  // namespace charm::cli
