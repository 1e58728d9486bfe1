#pragma once
// "Did you mean": the closest of a set of names to a mistyped one, for error messages.

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace charm {

/// Edit distance (insertions, deletions, substitutions, adjacent swaps), case-insensitive.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate nearest to `typed` when it is near enough to be a typo (at most a
/// third of its length away, and at most 3 edits); nullopt otherwise.
[[nodiscard]] std::optional<std::string> closest_name(std::string_view typed, std::span<const std::string> candidates);

/// " (did you mean 'x'?)" or "".
[[nodiscard]] std::string did_you_mean(std::string_view typed, std::span<const std::string> candidates);

}  // namespace charm
