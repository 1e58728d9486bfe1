// The one grammar of numbers a user types (flags, the Python module's arguments, CSV cells): decimal numbers,
// sizes with their suffixes, comma-separated lists and GPU lists.
#include "support/number_text.hpp"

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

#include "support/enum_names.hpp"

namespace charm {

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Decimal digits with at most one point and a digit on one side of it: "12", "1.5", ".5", "5.".
bool decimal_mantissa(std::string_view s) {
  const auto dot = s.find('.');
  if (dot == std::string_view::npos) return all_digits(s);
  const auto a = s.substr(0, dot), b = s.substr(dot + 1);
  return (all_digits(a) || a.empty()) && (all_digits(b) || b.empty()) && !(a.empty() && b.empty());
}

/// The power of ten of a decimal number's first significant digit: "120" 2, "0.05" -2, "1e400" 400.
double decimal_order(std::string_view text) {
  const auto e = text.find_first_of("eE");
  double exp = 0;
  if (e != std::string_view::npos) {
    auto x = text.substr(e + 1);
    if (x.starts_with('+')) x.remove_prefix(1);
    long long v = 0;
    const auto r = std::from_chars(x.data(), x.data() + x.size(), v);
    exp = r.ec == std::errc{} ? double(v) : x.starts_with('-') ? -1e300 : 1e300;  // an exponent past 64 bits
  }
  const auto mant = text.substr(0, e);
  const auto digit = mant.find_first_of("123456789");
  const auto dot = std::min(mant.find('.'), mant.size());
  if (digit == std::string_view::npos) return 0;
  return exp + (digit < dot ? double(dot - digit) - 1 : -double(digit - dot));
}

}  // namespace

double decimal_value(std::string_view text) {
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc::result_out_of_range) return v;
  const double magnitude = decimal_order(text) > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return text.starts_with('-') ? -magnitude : magnitude;
}

Expected<std::string> check_number(const std::string& text, NumberKind kind) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view body = std::string_view(text).substr(negative ? 1 : 0);
  if (kind == NumberKind::Real) {
    const auto e = body.find_first_of("eE");
    const auto mant = body.substr(0, e);
    auto exp = e == std::string_view::npos ? std::string_view{} : body.substr(e + 1);
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) exp.remove_prefix(1);
    const bool ok = decimal_mantissa(mant) && (e == std::string_view::npos || all_digits(exp));
    if (!ok) return Error{"", fmt::format("expected a decimal number like 2.5 or 1e-3, got '{}'", text)};
    if (!std::isfinite(decimal_value(text))) return Error{"", fmt::format("'{}' is too large", text)};
    return text;
  }
  if (!all_digits(body)) return Error{"", fmt::format("expected a decimal whole number like 8, got '{}'", text)};
  if (negative && kind == NumberKind::Unsigned) return Error{"", fmt::format("must be >= 0, got {}", text)};
  // Exact for any length: digits past 20 are too large for every flag.
  const auto first = body.find_first_not_of('0');
  const std::string_view digits = first == std::string_view::npos ? std::string_view("0") : body.substr(first);
  std::uint64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  const bool fits = r.ec == std::errc{} && (kind == NumberKind::Unsigned ? true
                                            : negative                   ? v <= std::uint64_t{1} << 31
                                                       : v <= std::uint64_t(std::numeric_limits<std::int32_t>::max()));
  if (!fits)
    return Error{"", kind == NumberKind::Unsigned
                         ? fmt::format("must be <= {}, got {}", std::numeric_limits<std::uint64_t>::max(), text)
                     : negative ? fmt::format("must be >= {}, got {}", std::numeric_limits<std::int32_t>::min(), text)
                                : fmt::format("must be <= {}, got {}", std::numeric_limits<std::int32_t>::max(), text)};
  // Built by appending: GCC 12 takes `"-" + std::string(...)` for an out-of-bounds copy (-Wstringop-overflow).
  std::string out = negative && v != 0 ? "-" : "";
  out += digits;
  return out;
}

Expected<std::int64_t> parse_size(const std::string& text, const std::string& flag) {
  if (text.empty()) return Error{flag, "expected a number, got nothing"};
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  // The grammar of every number: decimal digits, one point at most ("1.5.0k" is no size).
  if (i == 0 || !decimal_mantissa(std::string_view(text).substr(0, i)))
    return Error{flag, fmt::format("expected a number like 4096 or 128k, got '{}'", text)};
  const double v = decimal_value(std::string_view(text).substr(0, i));
  static constexpr EnumName<double> kSuffixes[] = {
      {"", 1},          {"k", 1024.0},       {"K", 1024.0},      {"m", 1048576.0},
      {"M", 1048576.0}, {"g", 1073741824.0}, {"G", 1073741824.0}};
  const std::string suffix = text.substr(i);
  const std::optional<double> mult = parse_enum(suffix, kSuffixes);
  if (!mult) return Error{flag, fmt::format("unknown size suffix '{}' in '{}' (use k, M or G)", suffix, text)};
  const double x = v * *mult;
  if (!std::isfinite(x) || x > 9e15) return Error{flag, fmt::format("'{}' is too large", text)};
  if (x != std::floor(x)) return Error{flag, fmt::format("'{}' is not a whole number", text)};
  return static_cast<std::int64_t>(x);
}

Expected<std::vector<std::int32_t>> parse_gpu_list(const std::string& s, const std::string& flag, std::int64_t limit,
                                                   const std::string& what) {
  std::vector<std::int32_t> map;
  for (const auto& item : split_list(s)) {
    const auto g = parse_size(item, flag);
    if (!g) return g.error();
    if (*g < 0 || *g >= limit) return Error{flag, fmt::format("GPU {} is not in [0, {}): {}", *g, limit, what)};
    map.push_back(std::int32_t(*g));
  }
  if (map.empty()) return Error{flag, "names no GPU"};
  std::vector<std::int32_t> sorted = map;
  std::sort(sorted.begin(), sorted.end());
  if (const auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
    return Error{flag, fmt::format("GPU {} is named twice", *d)};
  return map;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  constexpr const char* kSpace = " \t\n\r\f\v";
  for (std::size_t start = 0; start <= s.size();) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    const std::string item = s.substr(start, comma - start);
    start = comma + 1;
    // Spaces around an item go; spaces inside it ("my topo.json") are part of the name.
    const auto first = item.find_first_not_of(kSpace);
    if (first != std::string::npos) out.push_back(item.substr(first, item.find_last_not_of(kSpace) - first + 1));
  }
  return out;
}

std::string counted(std::int64_t n, std::string_view noun) {
  std::string s = std::to_string(n) + " ";
  s += noun;
  if (n != 1) s += 's';
  return s;
}

}  // namespace charm
