#pragma once
// The spellings of an enum's values, in one table per enum: parsing a flag or a field and naming a
// value both read it, so no code compares a text against a literal to tell values apart.

#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace charm {

/// One value and how users spell it.
template <class E>
struct EnumName {
  std::string_view name;
  E value;
};

/// The value spelt `text`, or nullopt when the table (an array of EnumName) has no such spelling.
template <class Names>
[[nodiscard]] constexpr auto parse_enum(std::string_view text, const Names& names)
    -> std::optional<decltype(std::begin(names)->value)> {
  for (const auto& n : names)
    if (n.name == text) return n.value;
  return std::nullopt;
}

/// The first spelling of `value` ("?" when the table lacks it).
template <class Names, class E>
[[nodiscard]] constexpr std::string_view enum_name(E value, const Names& names) {
  for (const auto& n : names)
    if (n.value == value) return n.name;
  return "?";
}

/// "a, b or c": the spellings, for an error message.
template <class Names>
[[nodiscard]] std::string enum_names_text(const Names& names) {
  std::string s;
  const std::size_t count = std::size(names);
  std::size_t i = 0;
  for (const auto& n : names) {
    if (i > 0) s += i + 1 == count ? " or " : ", ";
    s += n.name;
    ++i;
  }
  return s;
}

}  // namespace charm
