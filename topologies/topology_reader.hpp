#pragma once
// The topology loader's parts (topology_json.cpp and the files beside it) read the document through one
// reader: a cursor that knows its own JSON path, and typed fields whose errors name that path and what
// was wrong (docs/errors.md). Private to the loader: nothing outside topologies/ includes it.
//
//   topology_reader.cpp     the cursor and its typed fields
//   topology_gpu_json.cpp   "gpu" and "stack": the GPU's datasheet, its kernel and the software around it
//   topology_explicit.cpp   the explicit form: "gpus", "switches", "links"
//   topology_generator.cpp  the generator form: "nodes", "gpus_per_node", the intra/numa/inter link classes
//   topology_json.cpp       "routes" and the whole document (parse_topology, load_topology)
//   topology_document.cpp   a document completed and edited (complete_document, set_number) and summaries

#include <nlohmann/json.hpp>

#include <cstddef>
#include <limits>
#include <map>
#include <string>

#include "support/expected.hpp"
#include "support/json_fields.hpp"
#include "topologies/topology.hpp"
#include "topologies/topology_json.hpp"

namespace charm::topo::reader {

using nlohmann::json;

template <class T>
using Ex = Expected<T>;

/// A cursor into the document that knows its own JSON path, for error messages.
struct Node {
  const json& j;
  std::string path;
  const std::string& src;

  [[nodiscard]] Error error(const std::string& what) const;
  [[nodiscard]] bool has(const char* key) const { return j.is_object() && j.contains(key); }
  [[nodiscard]] Node at(const char* key) const;
  [[nodiscard]] Node at(std::size_t i) const;
  [[nodiscard]] Error missing(const char* key) const;
};

/// An explicit topology's routes are a GPU-by-GPU table; beyond this the table alone is gigabytes.
constexpr long kMaxGpus = 4096;
/// A generated cluster's routes come from its nodes (topology.hpp, BlockLayout): the
/// table is one node's GPUs by two nodes', so the bound is a node's size and the
/// largest --uniform cluster.
constexpr long kMaxGeneratedGpus = 1L << 16;

/// Unknown fields are rejected, not ignored (json_fields::unknown_field): a misspelt "bandwith_gbps" would
/// otherwise silently fall back to a default (docs/errors.md).
[[nodiscard]] Status check_fields(const Node& n, const std::vector<const char*>& known, const char* form = nullptr);
[[nodiscard]] Ex<double> get_number(const Node& n, const char* key, bool required, double def, bool positive,
                                    bool non_negative);
/// A physical number (topology.hpp's plausible ranges); `zero_is_none` lets 0 stand for "no limit" or "free".
[[nodiscard]] Ex<double> get_quantity(const Node& n, const char* key, bool required, double def, Quantity q,
                                      bool zero_is_none = false);
/// An integer in [min_value, max_value]. JSON integers have no width: one past
/// int64 is held as unsigned and reported as written, never wrapped to a negative.
[[nodiscard]] Ex<long> int_in(const Node& v, long min_value, long max_value);
[[nodiscard]] Ex<long> get_int(const Node& n, const char* key, bool required, long def, long min_value,
                               long max_value = std::numeric_limits<long>::max());
[[nodiscard]] Ex<std::string> text_of(const Node& v, const char* what = "a string");
[[nodiscard]] Ex<std::string> get_string(const Node& n, const char* key, bool required, const std::string& def);

// The parts of the document, each in its own file (above).
/// "stack": a preset name, or an object of a preset and fields over it (stack_fields.def).
[[nodiscard]] Status parse_stack(const Node& root, StackSpec& st, ModelSources& src);
[[nodiscard]] Status parse_gpu(const Node& n, const GpuOverrides& over, Topology& t);
[[nodiscard]] Status parse_link_params(const Node& n, Link& l, const char* default_sharing);
[[nodiscard]] Status parse_explicit(const Node& root, Topology& t, int& num_gpus_out);
[[nodiscard]] Status parse_generator(const Node& root, Topology& t, int& num_gpus_out);
[[nodiscard]] Status parse_routes(const Node& root, Topology& t, int num_gpus);

}  // namespace charm::topo::reader
