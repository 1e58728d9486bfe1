// A topology document completed (every default written out) and edited (one number set), and the summaries
// reports print of a topology.

#include "topologies/topology_json.hpp"

#include <fmt/format.h>

#include <string>

#include "topologies/gpu_arch.hpp"
#include "topologies/kernel_table.hpp"

namespace charm::topo {

namespace {

nlohmann::json stack_json(const StackSpec& st) {
  nlohmann::json j{{"preset", st.preset}};
  for (const StackField& f : kStackFields) j[std::string(f.name)] = st.*f.member;
  return j;
}

/// The kernel layer spelt out: a table's library and scales, or the flat efficiency.
void complete_kernel(nlohmann::json& g, const GpuSpec& spec) {
  if (spec.kernel) {
    if (g.contains("kernel") && g["kernel"].is_string()) g["kernel"] = {{"library", g["kernel"]}};
    if (!g["kernel"].contains("library")) g["kernel"]["library"] = spec.kernel->library;
    if (!g.contains("kernel_scale") || g["kernel_scale"].is_number())
      g["kernel_scale"] = {{"fwd", spec.kernel_scale_fwd}, {"bwd", spec.kernel_scale_bwd}};
    if (!g["kernel_scale"].contains("fwd")) g["kernel_scale"]["fwd"] = spec.kernel_scale_fwd;
    if (!g["kernel_scale"].contains("bwd")) g["kernel_scale"]["bwd"] = spec.kernel_scale_bwd;
    return;
  }
  if (!g.contains("efficiency")) g["efficiency"] = {{"fwd", spec.efficiency_fwd}, {"bwd", spec.efficiency_bwd}};
  if (g["efficiency"].is_number()) g["efficiency"] = {{"fwd", spec.efficiency_fwd}, {"bwd", spec.efficiency_bwd}};
  if (!g["efficiency"].contains("bwd")) g["efficiency"]["bwd"] = spec.efficiency_bwd;
}

void complete_gpu(nlohmann::json& g, const GpuSpec& spec) {
  complete_kernel(g, spec);
  for (const auto& [key, value] : {std::pair{"hbm_gbps", spec.hbm_gbps}, std::pair{"half_tokens", spec.half_tokens},
                                   std::pair{"launch_us", spec.launch_us}})
    if (!g.contains(key)) g[key] = value;
  if (!g.contains("sm_count")) g["sm_count"] = spec.sm_count;
  if (spec.sm_count == 0) return;
  for (const auto& [pass, tile] : {std::pair{"fwd", spec.tile_fwd}, std::pair{"bwd", spec.tile_bwd}}) {
    auto& k = g["kernel"][pass];
    if (!k.contains("tile_q")) k["tile_q"] = tile.q;
    if (!k.contains("tile_kv")) k["tile_kv"] = tile.kv;
  }
}

}  // namespace

Status complete_document(nlohmann::json& doc, const std::string& source) {
  auto t = parse_topology(doc, source);
  if (!t) return t.error();
  complete_gpu(doc["gpu"], t->gpu);
  doc["stack"] = stack_json(t->stack);
  // A generated node's GPU links: the first link of the file's form is GPU 0's.
  if (doc.contains("nodes") && doc.contains("intra") && !t->links.empty()) {
    auto& intra = doc["intra"];
    const Link& l = t->links.front();
    if (!intra.contains("per_flow_gbps")) intra["per_flow_gbps"] = l.per_flow_gbps;
    if (!intra.contains("injection_gbps")) intra["injection_gbps"] = l.injection_gbps;
  }
  return {};
}

Status set_number(nlohmann::json& doc, const std::string& path, double value, const std::string& source) {
  auto ptr = field_pointer(path);
  if (!ptr) return ptr.error();
  // The calibration block records a fit and is never read: a number set there would change nothing.
  if (path.substr(0, path.find_first_of(".[")) == "calibration")
    return Error{path, "is in the calibration record, which the simulator does not read"};
  if (!doc.contains(*ptr)) return Error{path, fmt::format("no such field in {}", source)};
  nlohmann::json& v = doc.at(*ptr);
  if (v.is_object()) {
    std::string keys;
    for (const auto& item : v.items())
      if (item.value().is_number()) keys += fmt::format("{}{}.{}", keys.empty() ? "" : ", ", path, item.key());
    return Error{path, fmt::format("is an object in {}; set one of its numbers{}", source,
                                   keys.empty() ? "" : " (" + keys + ")")};
  }
  if (!v.is_number()) return Error{path, fmt::format("is not a number in {} (it is {})", source, v.dump())};
  constexpr double kExactInts = 9007199254740992.0;  // 2^53: every whole double below is an exact int64
  if (std::trunc(value) == value && std::abs(value) < kExactInts)
    v = static_cast<std::int64_t>(value);
  else
    v = value;
  return {};
}

nlohmann::json model_sources_json(const ModelSources& m) {
  return {{"kernel", m.kernel}, {"stack", m.stack}, {"links", m.links}, {"assumed", m.assumed}};
}

nlohmann::json topology_summary(const Topology& t) {
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : t.links)
    links.push_back({{"a", t.vertex_names[std::size_t(l.a)]},
                     {"b", t.vertex_names[std::size_t(l.b)]},
                     {"bandwidth_gbps", l.bandwidth_gbps},
                     {"latency_us", l.latency_us},
                     {"per_flow_gbps", l.per_flow_gbps},
                     {"injection_gbps", l.injection_gbps},
                     {"sharing", enum_name(l.sharing, kSharingNames)},
                     {"kind", std::string(to_string(l.kind))}});
  return {{"name", t.name},
          {"gpus", t.num_gpus()},
          {"switches", t.num_vertices() - t.num_gpus()},
          {"domains", t.domains()},
          {"gpu",
           {{"model", t.gpu.model},
            {"tflops_bf16", t.gpu.tflops_bf16},
            {"hbm_gbps", t.gpu.hbm_gbps},
            {"efficiency_fwd", t.gpu.efficiency_fwd},
            {"efficiency_bwd", t.gpu.efficiency_bwd},
            {"launch_us", t.gpu.launch_us},
            {"memory_gb", t.gpu.memory_gb},
            {"sm_count", t.gpu.sm_count},
            {"tile_fwd", {t.gpu.tile_fwd.q, t.gpu.tile_fwd.kv}},
            {"tile_bwd", {t.gpu.tile_bwd.q, t.gpu.tile_bwd.kv}},
            {"kernel", t.gpu.kernel ? nlohmann::json(t.gpu.kernel->library) : nlohmann::json(nullptr)},
            {"family", t.gpu.family}}},
          {"stack", stack_json(t.stack)},
          {"model", model_sources_json(t.sources)},
          {"links", links},
          {"notes", t.notes}};
}

}  // namespace charm::topo
