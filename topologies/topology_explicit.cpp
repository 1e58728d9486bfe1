// The explicit form of a topology document: "gpus", "switches", "links", each written out.

#include "topologies/topology_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

namespace charm::topo::reader {

/// bandwidth_gbps (required, > 0), latency_us (>= 0, default 0), sharing (shared | dedicated); the link's
/// kind where the form lets the file say it (explicit links; the generator's intra links).
Status parse_link_params(const Node& n, Link& l, const char* default_sharing) {
  if (!n.j.is_object()) return n.error("must be an object");
  if (n.path == "inter") {
    if (auto s = check_fields(n, {"bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps", "injection_gbps", "nic",
                                  "gpus_per_nic", "pcie_gbps"});
        !s)
      return s;
  } else if (n.path == "intra") {
    if (auto s =
            check_fields(n, {"bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps", "injection_gbps", "kind"});
        !s)
      return s;
  } else if (default_sharing != nullptr) {
    if (auto s = check_fields(n, {"bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps", "injection_gbps"}); !s)
      return s;
  } else {
    if (auto s = check_fields(n, {"a", "b", "bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps",
                                  "injection_gbps", "kind", "name"});
        !s)
      return s;
  }
  CHARM_TRY_LET(bw, get_quantity(n, "bandwidth_gbps", true, 0, Quantity::Bandwidth));
  CHARM_TRY_LET(lat, get_quantity(n, "latency_us", false, 0, Quantity::Latency));
  CHARM_TRY_LET(sharing, get_string(n, "sharing", default_sharing == nullptr, default_sharing ? default_sharing : ""));
  CHARM_TRY_LET(per_flow, get_quantity(n, "per_flow_gbps", false, 0, Quantity::Bandwidth, /*zero_is_none=*/true));
  l.bandwidth_gbps = bw;
  l.latency_us = lat;
  l.per_flow_gbps = per_flow;
  CHARM_TRY_LET(injection, get_quantity(n, "injection_gbps", false, 0, Quantity::Bandwidth, /*zero_is_none=*/true));
  l.injection_gbps = injection;
  const auto how = parse_enum(sharing, kSharingNames);
  if (!how) return n.at("sharing").error(fmt::format("must be \"shared\" or \"dedicated\", got \"{}\"", sharing));
  l.sharing = *how;
  if (n.has("kind")) {
    CHARM_TRY_LET(kind, get_string(n, "kind", true, ""));
    const auto k = link_kind_from(kind);
    if (n.path == "intra") {
      if (k != LinkKind::NvLink && k != LinkKind::Pcie)
        return n.at("kind").error(fmt::format("must be \"nvlink\" or \"pcie\", got \"{}\"", kind));
    } else if (!k) {
      return n.at("kind").error(
          fmt::format("must be \"nvlink\", \"pcie\", \"host\", \"nic\" or \"fabric\", got \"{}\"", kind));
    }
    l.kind = *k;
  }
  return {};
}

namespace {

/// The "gpus" of an explicit topology: a count, or names and places (one integer per level).
Status read_explicit_gpus(const Node& root, Topology& t) {
  if (!root.has("gpus")) return root.missing("gpus");
  const Node gp = root.at("gpus");
  if (gp.j.is_number_integer()) {
    CHARM_TRY_LET(count, get_int(root, "gpus", true, 0, 1, kMaxGpus));
    for (long g = 0; g < count; ++g) {
      t.vertex_names.push_back(fmt::format("gpu{}", g));
      t.gpu_place.push_back(std::vector<int>(t.levels.size(), 0));
    }
  } else if (gp.j.is_array()) {
    if (gp.j.empty()) return gp.error("must list at least one GPU");
    if (gp.j.size() > std::size_t(kMaxGpus))
      return gp.error(fmt::format("at most {} GPUs are supported, got {}", kMaxGpus, gp.j.size()));
    for (std::size_t i = 0; i < gp.j.size(); ++i) {
      const Node g = gp.at(i);
      if (g.j.is_string()) {
        CHARM_TRY_LET(gname, text_of(g));
        t.vertex_names.push_back(std::move(gname));
        t.gpu_place.push_back(std::vector<int>(t.levels.size(), 0));
        continue;
      }
      if (!g.j.is_object()) return g.error("must be a name or an object {\"name\", \"place\"}");
      if (auto s = check_fields(g, {"name", "place"}); !s) return s;
      CHARM_TRY_LET(nm, get_string(g, "name", false, fmt::format("gpu{}", i)));
      t.vertex_names.push_back(nm);
      std::vector<int> place;
      if (g.has("place")) {
        const Node p = g.at("place");
        if (!p.j.is_array() || p.j.size() != t.levels.size())
          return p.error(fmt::format("must be an array of {} integers (one per level)", t.levels.size()));
        for (std::size_t k = 0; k < p.j.size(); ++k) {
          if (!p.j[k].is_number_integer()) return p.at(k).error("must be an integer");
          CHARM_TRY_LET(x, int_in(p.at(k), 0, std::numeric_limits<int>::max()));
          place.push_back(static_cast<int>(x));
        }
      } else {
        if (!t.levels.empty()) return g.missing("place");
      }
      t.gpu_place.push_back(std::move(place));
    }
  } else {
    return gp.error("must be a GPU count or an array of GPUs");
  }
  return {};
}

/// The "links" of an explicit topology, their ends named as GPUs or switches (`index`).
Status read_explicit_links(const Node& root, Topology& t, const std::map<std::string, int>& index) {
  if (!root.has("links")) return root.missing("links");
  const Node ln = root.at("links");
  if (!ln.j.is_array()) return ln.error("must be an array of links");
  for (std::size_t i = 0; i < ln.j.size(); ++i) {
    const Node l = ln.at(i);
    if (!l.j.is_object()) return l.error("must be an object");
    Link link;
    for (const char* end : {"a", "b"}) {
      CHARM_TRY_LET(nm, get_string(l, end, true, ""));
      auto it = index.find(nm);
      if (it == index.end()) return l.at(end).error(fmt::format("unknown GPU or switch \"{}\"", nm));
      (end[0] == 'a' ? link.a : link.b) = it->second;
    }
    if (link.a == link.b) return l.error("a link needs two different ends");
    if (auto s = parse_link_params(l, link, nullptr); !s) return s.error();
    CHARM_TRY_LET(nm, get_string(l, "name", false, ""));
    link.name = nm;
    t.links.push_back(link);
  }
  return {};
}

}  // namespace

Status parse_explicit(const Node& root, Topology& t, int& num_gpus_out) {
  if (auto s = check_fields(root,
                            {"schema", "name", "notes", "gpu", "stack", "levels", "gpus", "switches", "links", "domain",
                             "routes", "calibration"},
                            " in an explicit topology (one with \"gpus\" and \"links\")");
      !s)
    return s;
  // levels
  if (root.has("levels")) {
    const Node lv = root.at("levels");
    if (!lv.j.is_array()) return lv.error("must be an array of level names, outermost first");
    for (std::size_t i = 0; i < lv.j.size(); ++i) {
      CHARM_TRY_LET(level, text_of(lv.at(i)));
      t.levels.push_back(std::move(level));
    }
  }
  if (auto s = read_explicit_gpus(root, t); !s) return s;
  const int num_gpus = static_cast<int>(t.vertex_names.size());
  std::map<std::string, int> index;
  if (root.has("switches")) {
    const Node sw = root.at("switches");
    if (!sw.j.is_array()) return sw.error("must be an array of names");
    for (std::size_t i = 0; i < sw.j.size(); ++i) {
      CHARM_TRY_LET(swname, text_of(sw.at(i)));
      t.vertex_names.push_back(std::move(swname));
    }
  }
  for (std::size_t v = 0; v < t.vertex_names.size(); ++v) {
    if (!index.emplace(t.vertex_names[v], int(v)).second)
      return Error{root.src, fmt::format("{}: duplicate vertex name \"{}\"",
                                         v < std::size_t(num_gpus) ? "gpus" : "switches", t.vertex_names[v])};
  }
  if (auto s = read_explicit_links(root, t, index); !s) return s;
  // Kinds rank routes against each other, so a link without one cannot be ranked against those with one.
  const auto has_kind = [&](const Link& l) { return l.kind != LinkKind::Unspecified; };
  if (const auto k = std::find_if(t.links.begin(), t.links.end(), has_kind); k != t.links.end())
    if (const auto u = std::find_if_not(t.links.begin(), t.links.end(), has_kind); u != t.links.end())
      return Error{root.src,
                   fmt::format("links[{}].kind: missing, but links[{}] has one: give every link a kind or none",
                               u - t.links.begin(), k - t.links.begin())};
  if (root.has("domain")) {
    CHARM_TRY_LET(d, get_string(root, "domain", true, ""));
    auto it = std::find(t.levels.begin(), t.levels.end(), d);
    if (it == t.levels.end()) return root.at("domain").error(fmt::format("\"{}\" is not one of the levels", d));
    t.domain_level = static_cast<int>(it - t.levels.begin());
  } else if (!t.levels.empty()) {
    t.domain_level = 0;
  }
  num_gpus_out = num_gpus;
  return {};
}

}  // namespace charm::topo::reader
