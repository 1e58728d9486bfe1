#pragma once
// The reader of plan and workload files: typed JSON fields, each problem named by its JSON path.

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/expected.hpp"

namespace charm::ir::detail {

using nlohmann::json;

/// A JSON integer as int64, if it has one. JSON integers have no width: one past
/// int64 is held as unsigned, and is reported as written rather than wrapped.
inline std::optional<std::int64_t> as_int64(const json& v) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
    return std::nullopt;
  return v.get<std::int64_t>();
}

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

  /// Unknown fields are rejected, not ignored, as in topology files: a misspelt
  /// field would otherwise be silently dropped (docs/errors.md).
  Status known_fields(std::initializer_list<const char*> known) const {
    if (!j_.is_object()) return Error{path_, "must be an object"};
    for (const auto& item : j_.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || item.key() == k;
      if (ok) continue;
      std::string list;
      for (const char* k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
      return Error{path_ + "." + item.key(), fmt::format("unknown field (expected one of: {})", list)};
    }
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
    for (std::size_t i = 0; i < s.size(); ++i)
      if (const auto c = static_cast<unsigned char>(s[i]); c < 0x20 || c == 0x7f)
        return Error{
            path_ + "." + key,
            fmt::format("holds a control character (byte {:#04x} at offset {}): a name must be plain text", c, i)};
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

#define CHARM_TRY_ASSIGN(lhs, expr)                                                                                    \
  do {                                                                                                                 \
    auto charm_tmp_ = (expr);                                                                                          \
    if (!charm_tmp_) return charm_tmp_.error();                                                                        \
    lhs = std::move(*charm_tmp_);                                                                                      \
  } while (0)
