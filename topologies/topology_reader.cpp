// The topology loader's reader: a cursor that knows its JSON path, and typed fields (topology_reader.hpp).

#include "topologies/topology_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

namespace charm::topo::reader {

Error Node::error(const std::string& what) const { return Error{src, fmt::format("{}: {}", path, what)}; }
Node Node::at(const char* key) const { return {j.at(key), json_fields::child_path(path, key), src}; }
Node Node::at(std::size_t i) const { return {j.at(i), json_fields::index_path(path, i), src}; }
Error Node::missing(const char* key) const {
  return Error{src, fmt::format("{}: missing required field", json_fields::child_path(path, key))};
}

Status check_fields(const Node& n, const std::vector<const char*>& known, const char* form) {
  if (const std::string* key = json_fields::unknown_field(n.j, known))
    return Error{n.src, fmt::format("{}: unknown field{} (expected one of: {})", json_fields::child_path(n.path, *key),
                                    form ? form : "", json_fields::field_list(known))};
  return {};
}

Ex<double> get_number(const Node& n, const char* key, bool required, double def, bool positive, bool non_negative) {
  if (!n.has(key)) {
    if (required) return n.missing(key);
    return def;
  }
  const Node v = n.at(key);
  if (!v.j.is_number()) return v.error(fmt::format("must be a number, got {}", v.j.dump()));
  const double x = v.j.get<double>();
  // JSON has no NaN, but 1e400 parses to infinity.
  if (!std::isfinite(x)) return v.error(fmt::format("must be a finite number, got {}", v.j.dump()));
  if (positive && !(x > 0)) return v.error(fmt::format("must be > 0, got {}", v.j.dump()));
  if (non_negative && !(x >= 0)) return v.error(fmt::format("must be >= 0, got {}", v.j.dump()));
  return x;
}

/// A physical number (topology.hpp's plausible ranges); `zero_is_none` lets 0 stand for "no limit" or "free".
Ex<double> get_quantity(const Node& n, const char* key, bool required, double def, Quantity q, bool zero_is_none) {
  auto x = get_number(n, key, required, def, false, false);
  if (!x || !n.has(key) || (zero_is_none && *x == 0)) return x;
  if (const auto why = implausible(q, *x, key); !why.empty()) return n.at(key).error(why);
  return x;
}

/// An integer in [min_value, max_value]. JSON integers have no width: one past
/// int64 is held as unsigned and reported as written, never wrapped to a negative.
Ex<long> int_in(const Node& v, long min_value, long max_value) {
  if (!v.j.is_number_integer()) return v.error(fmt::format("must be an integer, got {}", v.j.dump()));
  if (v.j.is_number_unsigned() && v.j.get<std::uint64_t>() > static_cast<std::uint64_t>(max_value))
    return v.error(fmt::format("must be <= {}, got {}", max_value, v.j.dump()));
  const long x = v.j.get<long>();
  if (x < min_value) return v.error(fmt::format("must be >= {}, got {}", min_value, x));
  if (x > max_value) return v.error(fmt::format("must be <= {}, got {}", max_value, x));
  return x;
}

Ex<long> get_int(const Node& n, const char* key, bool required, long def, long min_value, long max_value) {
  if (!n.has(key)) {
    if (required) return n.missing(key);
    return def;
  }
  return int_in(n.at(key), min_value, max_value);
}

Ex<std::string> text_of(const Node& v, const char* what) {
  if (!v.j.is_string()) return v.error(fmt::format("must be {}, got {}", what, v.j.dump()));
  const auto& s = v.j.get_ref<const std::string&>();
  if (const auto i = json_fields::control_character_at(s); i != std::string::npos)
    return v.error(fmt::format("holds a control character (byte {:#04x} at offset {}): names and notes are "
                               "printed to terminals and scripts, so they must be plain text",
                               static_cast<unsigned char>(s[i]), i));
  return s;
}

Ex<std::string> get_string(const Node& n, const char* key, bool required, const std::string& def) {
  if (!n.has(key)) {
    if (required) return n.missing(key);
    return def;
  }
  return text_of(n.at(key));
}

}  // namespace charm::topo::reader
