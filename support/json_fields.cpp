#include "support/json_fields.hpp"

#include <fmt/format.h>

#include <limits>

namespace charm::json_fields {

std::string child_path(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

std::string index_path(const std::string& path, std::size_t i) { return fmt::format("{}[{}]", path, i); }

std::optional<std::int64_t> as_int64(const nlohmann::json& v) {
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
    return std::nullopt;
  return v.get<std::int64_t>();
}

const std::string* unknown_field(const nlohmann::json& j, std::span<const char* const> known) {
  if (!j.is_object()) return nullptr;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();  // the object's own key: it outlives the iterator
    bool ok = false;
    for (const char* k : known) ok = ok || key == k;
    if (!ok) return &key;
  }
  return nullptr;
}

std::string field_list(std::span<const char* const> known) {
  std::string list;
  for (const char* k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
  return list;
}

std::size_t control_character_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (const auto c = static_cast<unsigned char>(s[i]); c < 0x20 || c == 0x7f) return i;
  return std::string_view::npos;
}

}  // namespace charm::json_fields
