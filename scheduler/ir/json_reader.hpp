#pragma once
// The reader of plan and workload files: typed JSON fields, each problem named by its JSON path (the rules it
// shares with the topology reader are support/json_fields.hpp's; the wording is this format's own).

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/expected.hpp"
#include "support/json_fields.hpp"

namespace charm::ir::detail {

using nlohmann::json;

using json_fields::as_int64;

/// v (an integer) in [lo, hi], or the error naming `path` and the number as written.
inline Expected<std::int64_t> int_in(const json& v, std::int64_t lo, std::int64_t hi, const std::string& path,
                                     bool half_open = false) {
  const auto x = as_int64(v);
  const bool ok = x && *x >= lo && (half_open ? *x < hi : *x <= hi);
  if (!ok)
    return Error{path, half_open ? fmt::format("must be in [{}, {}), got {}", lo, hi, v.dump())
                                 : fmt::format("must be in [{}, {}], got {}", lo, hi, v.dump())};
  return *x;
}

// A small reader that names the JSON path of every problem.
class Reader {
 public:
  Reader(const json& j, std::string path) : j_(j), path_(std::move(path)) {}
  [[nodiscard]] const std::string& path() const { return path_; }

  /// Unknown fields are rejected, not ignored, as in topology files (json_fields::unknown_field).
  Status known_fields(std::initializer_list<const char*> known) const {
    if (!j_.is_object()) return Error{path_, "must be an object"};
    const std::span<const char* const> names(known.begin(), known.size());
    if (const std::string* key = json_fields::unknown_field(j_, names))
      return Error{path_ + "." + *key,
                   fmt::format("unknown field (expected one of: {})", json_fields::field_list(names))};
    return {};
  }
  Expected<const json*> field(const char* key, bool required = true) const {
    if (!j_.is_object()) return Error{path_, "must be an object"};
    auto it = j_.find(key);
    if (it == j_.end()) {
      if (required) return Error{path_ + "." + key, "missing field"};
      return static_cast<const json*>(nullptr);
    }
    return &*it;
  }
  Expected<std::int64_t> integer(const char* key, std::int64_t lo, std::int64_t hi, bool required = true,
                                 std::int64_t dflt = 0) const {
    auto f = field(key, required);
    if (!f) return f.error();
    if (*f == nullptr) return dflt;
    const json& v = **f;
    if (!v.is_number_integer()) return Error{path_ + "." + key, "must be an integer"};
    return int_in(v, lo, hi, path_ + "." + key);
  }
  Expected<bool> boolean(const char* key, bool dflt) const {
    auto f = field(key, false);
    if (!f) return f.error();
    if (*f == nullptr) return dflt;
    if (!(*f)->is_boolean()) return Error{path_ + "." + key, "must be true or false"};
    return (*f)->get<bool>();
  }
  Expected<double> number(const char* key, bool required = true) const {
    auto f = field(key, required);
    if (!f) return f.error();
    if (*f == nullptr) return 0.0;
    if (!(*f)->is_number()) return Error{path_ + "." + key, "must be a number"};
    const double x = (*f)->get<double>();
    if (!(x >= 0) || x > 1e30) return Error{path_ + "." + key, fmt::format("must be a finite number >= 0, got {}", x)};
    return x;
  }
  Expected<std::string> string(const char* key, bool required = true) const {
    auto f = field(key, required);
    if (!f) return f.error();
    if (*f == nullptr) return std::string{};
    if (!(*f)->is_string()) return Error{path_ + "." + key, "must be a string"};
    auto s = (*f)->get<std::string>();
    // A plan's strings are names, printed to terminals (validate, run) and CSV rows.
    if (const auto i = json_fields::control_character_at(s); i != std::string::npos)
      return Error{path_ + "." + key,
                   fmt::format("holds a control character (byte {:#04x} at offset {}): a name must be plain text",
                               static_cast<unsigned char>(s[i]), i)};
    return s;
  }
  template <class E, class P>
  Expected<E> enumeration(const char* key, P parse) const {
    auto s = string(key);
    if (!s) return s.error();
    auto e = parse(*s);
    if (!e) return Error{path_ + "." + key, e.error().what};
    return *e;
  }

 private:
  const json& j_;
  std::string path_;
};

}  // namespace charm::ir::detail
