#pragma once
// Parsing JSON text that a person wrote: a topology or a plan file. nlohmann's parser
// keeps the last of two equal keys, so `"nodes": 2, ..., "nodes": 3` would silently
// mean 3; here a repeated key is an error, as is anything after the document.

#include <cstddef>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>

#include "support/expected.hpp"

namespace charm {

/// Arrays and objects nest at most this deep in a document read from text, or from Python's dicts and
/// lists: a plan or a topology needs about 5 levels, and 30 MB of '[' would otherwise take gigabytes
/// before the parser reached their end.
inline constexpr std::size_t kMaxJsonDepth = 256;

/// Errors name `source`: "malformed JSON: ..." or "duplicate key 'nodes' in inter".
[[nodiscard]] Expected<nlohmann::json> parse_json_strict(const std::string& text, const std::string& source);
/// The same, reading a stream to its end (no copy of the text).
[[nodiscard]] Expected<nlohmann::json> parse_json_strict(std::istream& in, const std::string& source);

/// Empties `j` from its leaves up without allocating. nlohmann's destructor first moves the children
/// of an array or object into a vector of their own: when memory has just run out, that allocation
/// throws inside a destructor, which is std::terminate. Called on a large document about to be
/// destroyed while a std::bad_alloc is in flight. Recursive: a document read here nests at most
/// kMaxJsonDepth deep.
void release_json(nlohmann::json& j) noexcept;

}  // namespace charm
