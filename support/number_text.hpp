#pragma once
// The one grammar of numbers a user types, for every numeric flag, the Python module's arguments and the
// sizes and lists inside them. Decimal only: CLI11 alone reads `--ranks 010` as octal 8 and accepts 0x10,
// while sizes read 010 as 10. Whole numbers are digits with an optional '-'; reals add one decimal point and
// an exponent (2.5, 1e-3); no inf, no nan.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/expected.hpp"

namespace charm {

enum class NumberKind : std::uint8_t {
  Integer,   // a signed whole number that fits 32 bits (every int flag)
  Unsigned,  // a whole number >= 0 that fits 64 bits (--seed, --path-limit)
  Real,      // a finite decimal number
};
/// `text` checked against the grammar of `kind`: the text to convert (leading
/// zeros dropped, so nothing downstream can read 010 as octal), or why not.
[[nodiscard]] Expected<std::string> check_number(const std::string& text, NumberKind kind);
/// A decimal number that check_number accepts (or a size's digits), read the same in every locale:
/// strtod takes the host process's decimal comma, so that "1.5" is 1 under de_DE, where the Python
/// module runs. Past a double's range it is infinite, below it 0, as strtod gives.
[[nodiscard]] double decimal_value(std::string_view text);

/// "4096", "128k", "1M", "2g" (powers of 1024) -> value; errors name the flag.
[[nodiscard]] Expected<std::int64_t> parse_size(const std::string& text, const std::string& flag);

/// A count with its noun, singular for one: counted(1, "rank") is "1 rank", counted(16, "rank") "16 ranks".
[[nodiscard]] std::string counted(std::int64_t n, std::string_view noun);

/// "a, b,,c d " -> {"a", "b", "c d"}: comma-separated items, the whitespace around each
/// item and empty items dropped; spaces inside an item (a file name) are kept.
[[nodiscard]] std::vector<std::string> split_list(const std::string& s);

/// A --gpus list ("0,2,4,6"): GPU indices below `limit`, none named twice, at least one; errors
/// name `flag` and `what` (the topology, for the range).
[[nodiscard]] Expected<std::vector<std::int32_t>> parse_gpu_list(const std::string& s, const std::string& flag,
                                                                 std::int64_t limit, const std::string& what);

}  // namespace charm
