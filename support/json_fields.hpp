#pragma once
// What the project's JSON file readers share (the topology's, topologies/topology_reader.hpp; the plan's
// and the workload's, scheduler/ir/json_reader.hpp): the JSON path of a field, integers wider than int64,
// fields a format does not know, and control characters in names. Each format words its problems its own
// way, and docs/errors.md pins both wordings.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace charm::json_fields {

/// `path`.`key`, or `key` alone at the top of the document (an empty path).
[[nodiscard]] std::string child_path(const std::string& path, std::string_view key);
/// `path`[`i`].
[[nodiscard]] std::string index_path(const std::string& path, std::size_t i);

/// A JSON integer as int64, if it has one. JSON integers have no width: one past int64 is held as
/// unsigned, and is reported as written rather than wrapped to a negative.
[[nodiscard]] std::optional<std::int64_t> as_int64(const nlohmann::json& v);

/// The first key of the object `j` that `known` does not list; nullptr when there is none (or `j` is not an
/// object). Unknown fields are refused rather than ignored: a misspelt field would otherwise fall back to its
/// default without a word.
[[nodiscard]] const std::string* unknown_field(const nlohmann::json& j, std::span<const char* const> known);
/// "a, b, c": the fields a format knows, for the message about an unknown one.
[[nodiscard]] std::string field_list(std::span<const char* const> known);

/// The offset of the first control character (newline, ESC, NUL, DEL, ...) in `s`, or npos: names and
/// notes reach terminals, CSV rows and generated scripts, so they must be plain text.
[[nodiscard]] std::size_t control_character_at(std::string_view s);

}  // namespace charm::json_fields
