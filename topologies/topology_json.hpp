#pragma once
// Reading a topology from JSON (explicit or generator form; schema in docs/topology.md).
// Every error names the file and the JSON path of the offending field.

#include <nlohmann/json.hpp>
#include <string>

#include "topologies/topology.hpp"

namespace charm::topo {

/// Parses a topology; `source` (usually the file name) prefixes every error.
[[nodiscard]] Expected<Topology> parse_topology(const nlohmann::json& j, const std::string& source);
/// Parses topology text (malformed JSON is reported with its position).
[[nodiscard]] Expected<Topology> parse_topology_text(const std::string& text, const std::string& source);
/// Reads and parses a topology file.
[[nodiscard]] Expected<Topology> load_topology(const std::string& path);
/// A summary for `charm topo`: GPUs, switches, links, domains.
[[nodiscard]] nlohmann::json topology_summary(const Topology& t);

} // namespace charm::topo
