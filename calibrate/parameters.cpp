#include "calibrate/parameters.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <optional>

#include "topologies/topology.hpp"
#include "topologies/topology_json.hpp"

namespace charm::calib {

namespace {

std::string last_key(const std::string& path) {
  auto p = path.find_last_of('.');
  std::string k = p == std::string::npos ? path : path.substr(p + 1);
  if (auto b = k.find('['); b != std::string::npos) k.resize(b);
  return k;
}

bool has_component(const std::string& path, const std::string& key) {
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find_first_of(".[", start);
    if (end == std::string::npos) end = path.size();
    if (path.compare(start, end - start, key) == 0 && end - start == key.size()) return true;
    start = path.find('.', end);
    if (start == std::string::npos) break;
    ++start;
  }
  return false;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Bounds bandwidth_bounds(double base) {
  // Never below the topology's plausible range (topology.hpp), which the fitted file must pass.
  return Bounds{std::max(base / 20, topo::kMinGbps), base, Scale::Log, "bandwidth: [base/20, base]", true};
}

/// The quantity of a stack cost field (stack_fields.def), when `path` is one.
std::optional<topo::StackQuantity> stack_quantity(const std::string& path) {
  constexpr std::string_view kSection = "stack.";
  if (!path.starts_with(kSection)) return std::nullopt;
  for (const topo::StackField& f : topo::kStackFields)
    if (f.name == std::string_view(path).substr(kSection.size())) return f.quantity;
  return std::nullopt;
}

/// A stack field's bounds, by its quantity.
Bounds stack_bounds(topo::StackQuantity q, double base) {
  switch (q) {
  case topo::StackQuantity::Cost:
    return Bounds{0, 1000, Scale::Linear, "software cost: [0, 1000] us", true};
  case topo::StackQuantity::Passes:
    return Bounds{0, 20, Scale::Linear, "update passes: [0, 20]", true};
  case topo::StackQuantity::FusedPasses:
    return Bounds{0.5, 20, Scale::Log, "merge traffic: [0.5, 20] fused passes", true};
  case topo::StackQuantity::Slowdown:
    return Bounds{0, 2, Scale::Linear, "overlap slowdown: [0, 2] (2: three times as long)", true};
  case topo::StackQuantity::Bandwidth:
    break;
  }
  return bandwidth_bounds(base);
}

/// One rule of the registry: which fields it covers and their bounds given the base value.
struct Rule {
  std::function<bool(const std::string& path)> matches;
  std::function<Bounds(double base)> bounds;
};

const std::vector<Rule>& registry() {
  static const std::vector<Rule> rules{
      // A measured bandwidth is what the hardware attains, at most the base file's nominal rate.
      {[](const std::string& p) { return ends_with(last_key(p), "_gbps"); }, bandwidth_bounds},
      {[](const std::string& p) { return has_component(p, "efficiency"); },
       [](double) {
         return Bounds{1e-3, 1.0, Scale::Log, "efficiency: (0, 1]", true};
       }},
      // A kernel library's table times a scale: what a user's cluster attains beside the published benchmark.
      {[](const std::string& p) { return has_component(p, "kernel_scale"); },
       [](double) {
         return Bounds{0.05, 20, Scale::Log, "kernel scale: [0.05, 20] x the table's attainment", true};
       }},
      {[](const std::string& p) { return ends_with(last_key(p), "latency_us"); },
       [](double) {
         return Bounds{0, 1000, Scale::Linear, "latency: [0, 1000] us", true};
       }},
      {[](const std::string& p) { return last_key(p) == "launch_us"; },
       [](double) {
         return Bounds{0, 1000, Scale::Linear, "launch overhead: [0, 1000] us", true};
       }},
      {[](const std::string& p) { return is_measurement_parameter(p); },
       [](double) {
         return Bounds{0, 20, Scale::Linear, "measurement offset: [0, 20] ms", true};
       }},
      {[](const std::string& p) { return last_key(p) == "half_tokens"; },
       [](double) {
         return Bounds{0, 4096, Scale::Linear, "half-efficiency block side: [0, 4096] tokens", true};
       }},
  };
  return rules;
}

/// Fields that shape the cluster rather than describe its hardware: never fitted.
bool structural(const std::string& key) {
  static const std::vector<std::string> keys{"schema", "nodes", "gpus_per_node", "numa_per_node", "gpus", "place"};
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

}  // namespace

const std::vector<std::string>& default_fit_parameters() {
  // Every parameter of the three layers that measured runs can identify
  // (docs/validation.md): what the NIC attains across nodes, what a GPU's
  // concurrent transfers attain together inside a node, what a host bridge
  // carries across NUMA nodes; the kernel's attainment per pass; the stack's
  // per-step, per-message and merge costs and how much overlap costs each side.
  // calibrate drops those no row moves and reports the ones the rows cannot
  // tell apart (J^T J singular) rather than trusting their values.
  static const std::vector<std::string> params{"inter.bandwidth_gbps", "intra.injection_gbps", "numa.bandwidth_gbps",
                                               "gpu.efficiency.fwd",   "gpu.efficiency.bwd",   "gpu.kernel_scale.fwd",
                                               "gpu.kernel_scale.bwd", "stack.step_us",        "stack.update_passes",
                                               "stack.merge_traffic",  "stack.message_us",     "stack.compute_slowdown",
                                               "stack.comm_slowdown"};
  return params;
}

bool is_measurement_parameter(const std::string& path) { return path == kCommOffsetParameter; }

Expected<nlohmann::json::json_pointer> parameter_pointer(const std::string& path) {
  return topo::field_pointer(path, "parameter");
}

Expected<double> parameter_value(const nlohmann::json& doc, const std::string& path, const std::string& source) {
  auto ptr = parameter_pointer(path);
  if (!ptr) return ptr.error();
  if (structural(last_key(path)))
    return Error{path, "shapes the cluster (a count), it is not a hardware parameter to fit"};
  if (!doc.contains(*ptr)) return Error{path, fmt::format("no such field in {}", source)};
  const auto& v = doc.at(*ptr);
  if (v.is_object()) {
    std::string keys;
    for (const auto& item : v.items())
      if (item.value().is_number()) keys += fmt::format("{}{}.{}", keys.empty() ? "" : ", ", path, item.key());
    return Error{path,
                 fmt::format("is an object in {}; fit its numbers{}", source, keys.empty() ? "" : " (" + keys + ")")};
  }
  if (!v.is_number()) return Error{path, fmt::format("is not a number in {} (it is {})", source, v.dump())};
  return v.get<double>();
}

void set_parameter(nlohmann::json& doc, const std::string& path, double value) {
  auto ptr = parameter_pointer(path);
  doc[*ptr] = value;
}

Expected<Bounds> bounds_for(const std::string& path, double base) {
  // A stack field's line of stack_fields.def says its quantity; the registry's first matching rule the rest's.
  std::optional<Bounds> found;
  if (const auto stack = stack_quantity(path)) found = stack_bounds(*stack, base);
  for (auto r = registry().begin(); !found && r != registry().end(); ++r)
    if (r->matches(path)) found = r->bounds(base);
  if (found) {
    Bounds b = *found;
    // A base value outside the physical range still has to be reachable by the fit.
    b.lo = std::min(b.lo, base);
    b.hi = std::max(b.hi, base);
    if (b.scale == Scale::Log && !(b.lo > 0))
      return Error{path, fmt::format("base value {} is not > 0; it cannot be fitted in log space", base)};
    return b;
  }
  if (!(base > 0))
    return Error{
        path,
        fmt::format("base value {} gives no range: fields outside the bounds registry are fitted in [base/10, base*10]",
                    base)};
  return Bounds{base / 10, base * 10, Scale::Log, "not in the bounds registry: [base/10, base*10]", false};
}

}  // namespace charm::calib
