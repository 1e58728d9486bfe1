// Parameters `charm calibrate` fixes from nccl-tests logs instead of fitting them.

#include "calibrate/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "topologies/topology_json.hpp"

namespace charm::calib {

using nlohmann::json;

Expected<std::vector<FixedParameter>> fixed_from_nccl_tests(const json& base, const std::string& base_source,
                                                            const std::string& cls, const NcclLog& log) {
  constexpr Field where = Field::NcclTests;
  const auto link_class = parse_enum(cls, kLinkClassNames);
  if (!link_class) return Error{where, fmt::format("unknown link class '{}' (expected intra, numa or inter)", cls)};
  if (!base.contains("nodes"))
    return Error{where,
                 fmt::format("{} is an explicit topology; link classes belong to the generator form", base_source)};
  if (!base.contains(cls) || !base[cls].is_object())
    return Error{where, fmt::format("{} has no '{}' block", base_source, cls)};
  auto ab = fit_alpha_beta(log);
  if (!ab) return ab.error();
  // A pair of GPUs whose route crosses the class: GPU 0 and its neighbour in the same NUMA
  // node (intra), the first GPU of the next NUMA node (numa) or of the next node (inter).
  json probe = base;
  const long per_node = base.value("gpus_per_node", 1L), numa = base.value("numa_per_node", 1L);
  int dst = 1;
  if (*link_class == LinkClass::Numa) {
    if (numa < 2)
      return Error{where, fmt::format("{} has one NUMA node per node: no numa link to measure", base_source)};
    dst = int(per_node / numa);
  } else if (*link_class == LinkClass::Inter) {
    if (base.value("nodes", 1L) < 2) probe["nodes"] = 2;
    dst = int(per_node);
  } else if (per_node / numa < 2) {
    return Error{where, fmt::format("{} has one GPU per NUMA node: no intra link pair to measure", base_source)};
  }
  // The route's latency is linear in the class's: k links of it plus the others'.
  double lat[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    probe[cls]["latency_us"] = double(i);
    auto t = topo::parse_topology(probe, base_source);
    if (!t) return t.error();
    lat[i] = t->route_latency_us(0, dst);
  }
  const double k = lat[1] - lat[0], others = lat[0];
  if (!(k > 0)) return Error{where, fmt::format("no route of {} crosses a '{}' link", base_source, cls)};
  const double latency = std::max(0.0, (ab->alpha_us - others) / k);
  const json detail = {{"alpha_us", ab->alpha_us},
                       {"beta_gbps", ab->beta_gbps},
                       {"bus_factor", ab->bus_factor},
                       {"busbw_gbps", ab->busbw_gbps},
                       {"peak_busbw_gbps", ab->peak_busbw_gbps},
                       {"rows", ab->rows},
                       {"links_on_route", k},
                       {"other_latency_us", others}};
  std::vector<FixedParameter> out;
  auto base_of = [&](const char* key, double dflt) {
    return base[cls].contains(key) && base[cls][key].is_number() ? base[cls][key].get<double>() : dflt;
  };
  out.push_back({cls + ".bandwidth_gbps", ab->busbw_gbps, base_of("bandwidth_gbps", kNaN), log.source, detail});
  out.push_back({cls + ".latency_us", latency, base_of("latency_us", 0), log.source, detail});
  return out;
}

}  // namespace charm::calib
