#pragma once
// Reading a topology from JSON (explicit or generator form; schema in docs/topology.md).
// Every error names the file and the JSON path of the offending field.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "topologies/topology.hpp"

namespace charm::topo {

/// What a command's --kernel and --assume-gpu put over a file's "gpu" block.
struct GpuOverrides {
  std::string kernel;                               // a kernel library (fa2, fa3, cudnn) over the file's
  std::shared_ptr<const KernelTable> kernel_table;  // or the user's own kernel timings
  std::string assume_gpu;                           // a known part an unknown model borrows from
  [[nodiscard]] bool empty() const { return kernel.empty() && !kernel_table && assume_gpu.empty(); }
};

/// Parses a topology; `source` (usually the file name) prefixes every error.
[[nodiscard]] Expected<Topology> parse_topology(const nlohmann::json& j, const std::string& source,
                                                const GpuOverrides& over = {});
/// Parses topology text (malformed JSON is reported with its position).
[[nodiscard]] Expected<Topology> parse_topology_text(const std::string& text, const std::string& source);
/// Reads and parses a topology file.
[[nodiscard]] Expected<Topology> load_topology(const std::string& path, const GpuOverrides& over = {});
/// Reads a topology file as a JSON document, unchecked: for callers that edit it before parse_topology.
[[nodiscard]] Expected<nlohmann::json> read_topology_json(const std::string& path);
/// A dotted field path as a JSON pointer: "gpu.efficiency.fwd" -> /gpu/efficiency/fwd, "links[3].latency_us"
/// -> /links/3/latency_us. Errors name the path and call it a `noun` path ("field", "parameter").
[[nodiscard]] Expected<nlohmann::json::json_pointer> field_pointer(const std::string& path,
                                                                   std::string_view noun = "field");
/// Replaces the number at `path` ("inter.bandwidth_gbps", "gpu.efficiency.fwd", "links[3].latency_us")
/// in a topology document, for what-if sweeps. Only the path is checked here (it must name a number
/// the document has); whether the value is acceptable is parse_topology's verdict on the edited
/// document. A whole value is written as an integer, so count fields such as `nodes` can be swept.
/// Writes into `doc` every documented field it leaves to a default, with the value that default
/// takes (the GPU's architecture, the stack preset's fields, the stack's limits on generated GPU
/// links), so that `--set` and `--fit` reach them; the document describes the same cluster after.
[[nodiscard]] Status complete_document(nlohmann::json& doc, const std::string& source);
[[nodiscard]] Status set_number(nlohmann::json& doc, const std::string& path, double value, const std::string& source);
/// Where the model's values come from (the reports' "model" object).
[[nodiscard]] nlohmann::json model_sources_json(const ModelSources& m);
/// A summary for `charm topo`: GPUs, switches, links, domains.
[[nodiscard]] nlohmann::json topology_summary(const Topology& t);

}  // namespace charm::topo
