// Routes: chosen by link kind and hop count, never by the link numbers; kept
// for files without kinds; fixed by a file's "routes"; shown by `charm topo`.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

#include "test_util.hpp"

namespace charm::topo {
namespace {

using nlohmann::json;

// The nominal presets: their numbers are the datasheet ones the expectations below are worked out from.
std::string preset(const char* name) { return std::string(CHARM_SOURCE_DIR) + "/topologies/nominal/" + name; }

Topology parse_json(const json& j) {
  auto t = parse_topology(j, "x.json");
  EXPECT_TRUE(t.ok()) << t.error().message();
  return t.ok() ? std::move(t).value() : Topology{};
}

Topology parse(const std::string& text) { return parse_json(json::parse(text)); }

std::string err(const std::string& text) {
  auto t = parse_topology_text(text, "x.json");
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.error().message();
}

/// The route as vertex names: "g0 sw0 rc0 sw1 g2".
std::string path(const Topology& t, int s, int d) {
  std::string out = t.vertex_names[std::size_t(s)];
  for (auto ch : t.route(s, d)) out += " " + t.vertex_names[std::size_t(t.channel_to(ch))];
  return out;
}

/// Every route, pair by pair, as channel ids.
std::vector<std::vector<std::int32_t>> table(const Topology& t) {
  std::vector<std::vector<std::int32_t>> out;
  for (int s = 0; s < t.num_gpus(); ++s)
    for (int d = 0; d < t.num_gpus(); ++d) {
      const auto r = t.route(s, d);
      out.emplace_back(r.begin(), r.end());
    }
  return out;
}

json load_json(const std::string& file) {
  std::ifstream in(file);
  return json::parse(in);
}

// (a) A per-message cost folded into NVLink's latency must not send intra-node
// traffic over the NICs: NCCL keeps using NVLink, and so do the routes.
TEST(Routes, NvSwitchCarriesIntraNodeTrafficWhateverItsLatency) {
  json base_j = load_json(preset("h100-2x8.json"));
  base_j["stack"] = "none";  // the arithmetic below is the links' alone: no stack, no NCCL attainment limits
  base_j["intra"]["per_flow_gbps"] = 0;
  base_j["intra"]["injection_gbps"] = 0;
  json slow_j = base_j;
  slow_j["intra"]["latency_us"] = 100;
  const Topology base = parse_json(base_j), slow = parse_json(slow_j);
  for (int s = 0; s < 16; ++s)
    for (int d = 0; d < 16; ++d) {
      if (s == d || s / 8 != d / 8) continue;
      EXPECT_EQ(path(slow, s, d), fmt::format("n{}.gpu{} n{}.switch n{}.gpu{}", s / 8, s % 8, s / 8, d / 8, d % 8));
      EXPECT_EQ(slow.route_kind(s, d), LinkKind::NvLink);
    }
  EXPECT_EQ(table(slow), table(base));

  ir::Workload w;
  w.batch = 1;
  w.seq = 32 * 1024;
  w.heads = w.kv_heads = 8;
  w.head_dim = 128;
  const auto a = sim::evaluate({"ring", w, 16, 2}, base);
  const auto b = sim::evaluate({"ring", w, 16, 2}, slow);
  ASSERT_TRUE(a.ok() && b.ok());
  // Every step each rank passes on one KV shard: 2 (K, V) x 2048 tokens x 8 heads x 128 x 2 bytes.
  const double bytes = 2.0 * (32 * 1024 / 16) * 8 * 128 * 2;
  // NVSwitch channels carry the 14 intra-node transfers of each of the 15
  // steps, the NICs only the 2 that cross nodes.
  double nvlink_bytes = 0, nic_bytes = 0;
  for (int ch = 0; ch < slow.num_channels(); ++ch)
    (slow.channel_link(ch).kind == LinkKind::NvLink ? nvlink_bytes : nic_bytes) +=
        b->result.channels[std::size_t(ch)].bytes;
  EXPECT_DOUBLE_EQ(nvlink_bytes, 15 * 14 * 2 * bytes);
  EXPECT_DOUBLE_EQ(nic_bytes, 15 * 2 * 2 * bytes);
  // The ring is bound by communication (a block computes in ~47 us), and each
  // step waits for its slowest transfer: the cross-node one (16 us + bytes at
  // 42.5 GB/s) before, the intra-node one (2 x 100 us + bytes at 365.1 GB/s)
  // after. Nothing else changes, so the time grows by 15 times the difference.
  const double cross = bytes / 42.5e9 + 16e-6;
  const double intra_before = bytes / 365.1e9 + 6e-6, intra_after = bytes / 365.1e9 + 200e-6;
  const double expected = 15 * (std::max(intra_after, cross) - std::max(intra_before, cross));
  EXPECT_NEAR(b->summary.time_s - a->summary.time_s, expected, 1e-9);
  EXPECT_GT(expected, 100e-6);  // a real difference, not a tie
}

// (b) No calibration of any one link class moves a route, on any preset.
TEST(Routes, PresetRoutesIgnoreLinkNumbers) {
  int presets = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CHARM_SOURCE_DIR) + "/topologies")) {
    if (e.path().extension() != ".json") continue;
    ++presets;
    auto loaded = load_topology(e.path().string());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message();
    const Topology& base = *loaded;
    const auto expected = table(base);
    for (const auto kind : {LinkKind::NvLink, LinkKind::Pcie, LinkKind::Host, LinkKind::Nic, LinkKind::Fabric}) {
      for (const auto& [lat_x, bw_x] : std::vector<std::pair<double, double>>{
               {1000, 1}, {10, 1}, {0.001, 1}, {1, 0.01}, {1, 0.1}, {1, 100}, {1000, 0.01}}) {
        Topology t = base;
        bool touched = false;
        for (auto& l : t.links)
          if (l.kind == kind) {
            // A link with no latency gets one, so that scaling it means something.
            l.latency_us = (l.latency_us > 0 ? l.latency_us : 1.0) * lat_x;
            l.bandwidth_gbps *= bw_x;
            touched = true;
          }
        if (!touched) continue;
        ASSERT_TRUE(t.finalize(t.num_gpus(), "scaled").ok());
        EXPECT_EQ(table(t), expected) << e.path().filename() << ": " << to_string(kind) << " latency x" << lat_x
                                      << ", bandwidth x" << bw_x;
      }
    }
  }
  EXPECT_GE(presets, 7);
}

// Without kinds the hop count rules, and the old weight only breaks ties of equal hop count.
TEST(Routes, WithoutKindsEqualHopRoutesAreToldApartByTheOldWeight) {
  // Fabric links come first, so channel ids alone would pick the NIC.
  const auto t = parse(R"({"gpu": {"tflops": 100}, "gpus": 3, "switches": ["fabric", "nvsw"], "links": [
      {"a": "gpu0", "b": "fabric", "bandwidth_gbps": 25, "latency_us": 8, "sharing": "shared"},
      {"a": "gpu1", "b": "fabric", "bandwidth_gbps": 25, "latency_us": 8, "sharing": "shared"},
      {"a": "gpu2", "b": "fabric", "bandwidth_gbps": 25, "latency_us": 8, "sharing": "shared"},
      {"a": "gpu0", "b": "nvsw", "bandwidth_gbps": 300, "latency_us": 3, "sharing": "dedicated"},
      {"a": "gpu1", "b": "nvsw", "bandwidth_gbps": 300, "latency_us": 3, "sharing": "dedicated"}]})");
  EXPECT_EQ(path(t, 0, 1), "gpu0 nvsw gpu1");
  EXPECT_EQ(path(t, 1, 0), "gpu1 nvsw gpu0");
  EXPECT_EQ(path(t, 0, 2), "gpu0 fabric gpu2");
  EXPECT_EQ(t.route_kind(0, 1), LinkKind::Unspecified);
}

// (c) An L20-style PCIe tree without kinds keeps the routes it had: two GPUs
// under one PCIe switch, one under a second switch of the same root complex,
// one across the inter-socket link.
TEST(Routes, ExplicitPcieNumaTreeKeepsItsRoutes) {
  const std::string links = R"(
      {"a": "g0", "b": "sw0", "bandwidth_gbps": 24, "latency_us": 5, "sharing": "shared"KIND_PCIE},
      {"a": "g1", "b": "sw0", "bandwidth_gbps": 24, "latency_us": 5, "sharing": "shared"KIND_PCIE},
      {"a": "g2", "b": "sw1", "bandwidth_gbps": 24, "latency_us": 5, "sharing": "shared"KIND_PCIE},
      {"a": "g3", "b": "sw2", "bandwidth_gbps": 24, "latency_us": 5, "sharing": "shared"KIND_PCIE},
      {"a": "sw0", "b": "rc0", "bandwidth_gbps": 26, "sharing": "shared"KIND_HOST},
      {"a": "sw1", "b": "rc0", "bandwidth_gbps": 26, "sharing": "shared"KIND_HOST},
      {"a": "sw2", "b": "rc1", "bandwidth_gbps": 26, "sharing": "shared"KIND_HOST},
      {"a": "rc0", "b": "rc1", "bandwidth_gbps": 14.7, "latency_us": 8, "sharing": "shared"KIND_HOST}])";
  const std::vector<std::pair<std::pair<int, int>, std::string>> pinned = {{{0, 1}, "g0 sw0 g1"},
                                                                           {{1, 0}, "g1 sw0 g0"},
                                                                           {{0, 2}, "g0 sw0 rc0 sw1 g2"},
                                                                           {{2, 0}, "g2 sw1 rc0 sw0 g0"},
                                                                           {{1, 2}, "g1 sw0 rc0 sw1 g2"},
                                                                           {{2, 1}, "g2 sw1 rc0 sw0 g1"},
                                                                           {{0, 3}, "g0 sw0 rc0 rc1 sw2 g3"},
                                                                           {{3, 0}, "g3 sw2 rc1 rc0 sw0 g0"},
                                                                           {{1, 3}, "g1 sw0 rc0 rc1 sw2 g3"},
                                                                           {{3, 1}, "g3 sw2 rc1 rc0 sw0 g1"},
                                                                           {{2, 3}, "g2 sw1 rc0 rc1 sw2 g3"},
                                                                           {{3, 2}, "g3 sw2 rc1 rc0 sw1 g2"}};
  for (const bool kinds : {false, true}) {
    std::string l = links;
    for (const auto& [mark, kind] : {std::pair{std::string("KIND_PCIE"), std::string(R"(, "kind": "pcie")")},
                                     std::pair{std::string("KIND_HOST"), std::string(R"(, "kind": "host")")}})
      for (std::size_t p; (p = l.find(mark)) != std::string::npos;) l.replace(p, mark.size(), kinds ? kind : "");
    const auto t = parse(R"({"gpu": {"tflops": 119.5}, "levels": ["numa"],
        "gpus": [{"name": "g0", "place": [0]}, {"name": "g1", "place": [0]}, {"name": "g2", "place": [0]}, {"name": "g3", "place": [1]}],
        "switches": ["sw0", "sw1", "sw2", "rc0", "rc1"], "links": [)" +
                         l + "}");
    ASSERT_EQ(t.num_gpus(), 4);
    for (const auto& [pair, expected] : pinned)
      EXPECT_EQ(path(t, pair.first, pair.second), expected) << "kinds: " << kinds;
    EXPECT_EQ(t.route_kind(0, 1), kinds ? LinkKind::Pcie : LinkKind::Unspecified);
    EXPECT_EQ(t.route_kind(0, 3), kinds ? LinkKind::Host : LinkKind::Unspecified);
  }
}

// With kinds: NVLink before PCIe before the host bridge before the network,
// however short, wide or fast the others are; ties go to the lowest channel ids.
TEST(Routes, KindsRankTransportsBeforeHopsAndNumbers) {
  const auto t = parse(
      R"({"gpu": {"tflops": 100}, "gpus": 4, "switches": ["nvsw1", "nvsw0", "psw0", "psw1", "rc", "fabric"], "links": [
      {"a": "gpu0", "b": "nvsw1", "bandwidth_gbps": 1, "latency_us": 1000, "sharing": "dedicated", "kind": "nvlink"},
      {"a": "gpu1", "b": "nvsw1", "bandwidth_gbps": 1, "latency_us": 1000, "sharing": "dedicated", "kind": "nvlink"},
      {"a": "gpu0", "b": "nvsw0", "bandwidth_gbps": 900, "sharing": "dedicated", "kind": "nvlink"},
      {"a": "gpu1", "b": "nvsw0", "bandwidth_gbps": 900, "sharing": "dedicated", "kind": "nvlink"},
      {"a": "gpu0", "b": "psw0", "bandwidth_gbps": 64, "sharing": "shared", "kind": "pcie"},
      {"a": "gpu1", "b": "psw0", "bandwidth_gbps": 64, "sharing": "shared", "kind": "pcie"},
      {"a": "gpu2", "b": "psw1", "bandwidth_gbps": 64, "sharing": "shared", "kind": "pcie"},
      {"a": "psw0", "b": "rc", "bandwidth_gbps": 1, "latency_us": 500, "sharing": "shared", "kind": "host"},
      {"a": "psw1", "b": "rc", "bandwidth_gbps": 1, "latency_us": 500, "sharing": "shared", "kind": "host"},
      {"a": "gpu0", "b": "fabric", "bandwidth_gbps": 400, "sharing": "shared", "kind": "nic"},
      {"a": "gpu1", "b": "fabric", "bandwidth_gbps": 400, "sharing": "shared", "kind": "nic"},
      {"a": "gpu2", "b": "fabric", "bandwidth_gbps": 400, "sharing": "shared", "kind": "nic"},
      {"a": "gpu3", "b": "fabric", "bandwidth_gbps": 400, "sharing": "shared", "kind": "nic"}]})");
  // Two NVSwitches, equally short: the one whose links come first, slow as it is.
  EXPECT_EQ(path(t, 0, 1), "gpu0 nvsw1 gpu1");
  EXPECT_EQ(path(t, 1, 0), "gpu1 nvsw1 gpu0");
  // Through the host bridge (4 hops) rather than the NIC (2 hops, 400 GB/s).
  EXPECT_EQ(path(t, 0, 2), "gpu0 psw0 rc psw1 gpu2");
  EXPECT_EQ(t.route_kind(0, 2), LinkKind::Host);
  // Only the network reaches gpu3.
  EXPECT_EQ(path(t, 0, 3), "gpu0 fabric gpu3");
  EXPECT_EQ(t.route_kind(0, 3), LinkKind::Nic);
  // Kinds do not let a GPU forward: gpu2 hangs off gpu0 alone, so gpu1 cannot reach it.
  EXPECT_NE(err(R"({"gpu": {"tflops": 100}, "gpus": 3, "switches": ["f"], "links": [
      {"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 1, "sharing": "shared", "kind": "nvlink"},
      {"a": "gpu0", "b": "f", "bandwidth_gbps": 1, "sharing": "shared", "kind": "nic"},
      {"a": "gpu2", "b": "gpu0", "bandwidth_gbps": 1, "sharing": "shared", "kind": "nvlink"}]})")
                .find("GPU gpu2 is unreachable"),
            std::string::npos);
}

TEST(Routes, GeneratorNamesItsLinksKinds) {
  const auto t = parse(R"({"gpu": {"tflops": 100}, "nodes": 2, "gpus_per_node": 4, "numa_per_node": 2,
      "intra": {"bandwidth_gbps": 24, "sharing": "shared"}, "numa": {"bandwidth_gbps": 14.7}, "inter": {"bandwidth_gbps": 50}})");
  // Across NUMA nodes in a node: the host bridge (4 hops), not the GPU's own NIC (2 hops).
  EXPECT_EQ(path(t, 0, 2), "n0.gpu0 n0.numa0.switch n0.host n0.numa1.switch n0.gpu2");
  EXPECT_EQ(t.route_kind(0, 2), LinkKind::Host);
  EXPECT_EQ(t.route_kind(0, 1), LinkKind::Pcie);
  EXPECT_EQ(path(t, 0, 5), "n0.gpu0 fabric n1.gpu1");
  EXPECT_EQ(t.route_kind(0, 5), LinkKind::Nic);
  const auto nv =
      parse(R"({"gpu": {"tflops": 100}, "nodes": 1, "gpus_per_node": 2, "intra": {"bandwidth_gbps": 300}})");
  EXPECT_EQ(nv.route_kind(0, 1), LinkKind::NvLink);
  const auto pcie = parse(
      R"({"gpu": {"tflops": 100}, "nodes": 1, "gpus_per_node": 2, "intra": {"bandwidth_gbps": 300, "kind": "pcie"}})");
  EXPECT_EQ(pcie.route_kind(0, 1), LinkKind::Pcie);
}

const char* kSmall = R"({"gpu": {"tflops": 100}, "nodes": 2, "gpus_per_node": 2,
    "intra": {"bandwidth_gbps": 300, "latency_us": 1}, "inter": {"bandwidth_gbps": 40, "latency_us": 5}, "routes": [ROUTES]})";

/// kSmall with `routes` as the routes array's contents, or, with `whole`, as the whole value.
std::string small(const std::string& routes, bool whole = false) {
  std::string s = kSmall;
  if (whole)
    s.replace(s.find("[ROUTES]"), 8, routes);
  else
    s.replace(s.find("ROUTES"), 6, routes);
  return s;
}

// (d) A route the file fixes is the one used, in both directions unless the file gives the reverse.
TEST(Routes, OverrideIsUsed) {
  const auto t = parse(small(R"({"src": "n0.gpu0", "dst": "n0.gpu1", "via": ["fabric"]})"));
  EXPECT_EQ(path(t, 0, 1), "n0.gpu0 fabric n0.gpu1");
  EXPECT_EQ(path(t, 1, 0), "n0.gpu1 fabric n0.gpu0");
  EXPECT_TRUE(t.route_overridden(0, 1) && t.route_overridden(1, 0));
  EXPECT_FALSE(t.route_overridden(2, 3));
  EXPECT_EQ(path(t, 2, 3), "n1.gpu0 n1.switch n1.gpu1");
  EXPECT_DOUBLE_EQ(t.route_bandwidth_gbps(0, 1), 40);
  EXPECT_DOUBLE_EQ(t.route_latency_us(0, 1), 10);
  EXPECT_EQ(t.route_kind(0, 1), LinkKind::Nic);

  const auto both = parse(small(R"({"src": "n0.gpu0", "dst": "n0.gpu1", "via": ["fabric"]},
                                  {"src": "n0.gpu1", "dst": "n0.gpu0", "via": ["n0.switch"]})"));
  EXPECT_EQ(path(both, 0, 1), "n0.gpu0 fabric n0.gpu1");
  EXPECT_EQ(path(both, 1, 0), "n0.gpu1 n0.switch n0.gpu0");

  // The simulator moves the bytes along it: ring 0 -> 1 -> 2 -> 3 -> 0, 3 steps.
  ir::Workload w;
  w.seq = 4096;
  const auto r = sim::evaluate({"ring", w, 4, 1}, t);
  ASSERT_TRUE(r.ok()) << r.error().message();
  const double bytes = 2.0 * 1024 * 8 * 128 * 2;
  for (int ch = 0; ch < t.num_channels(); ++ch) {
    const auto name = t.channel_name(ch);
    const double b = r->result.channels[std::size_t(ch)].bytes;
    if (name == "n0.gpu0->n0.switch" || name == "n0.switch->n0.gpu1") {
      EXPECT_EQ(b, 0) << name;
    }
    if (name == "n0.gpu0->fabric" || name == "fabric->n0.gpu1") {
      EXPECT_DOUBLE_EQ(b, 3 * bytes) << name;
    }
  }
}

TEST(Routes, OverrideErrorsNameThePath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("x")", R"(x.json: routes[0]: must be an object {"src", "dst", "via"})"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu1", "hops": []})",
       "x.json: routes[0].hops: unknown field (expected one of: src, dst, via)"},
      {R"({"dst": "n0.gpu1"})", "x.json: routes[0].src: missing required field"},
      {R"({"src": "n0.gpu9", "dst": "n0.gpu1"})", R"(x.json: routes[0].src: unknown GPU "n0.gpu9")"},
      {R"({"src": "n0.gpu0", "dst": "fabric"})", R"(x.json: routes[0].dst: "fabric" is a switch, not a GPU)"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu0"})", R"(x.json: routes[0].dst: "n0.gpu0" is also the source)"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu1", "via": "fabric"})",
       "x.json: routes[0].via: must be an array of switch names"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu1", "via": [3]})", "x.json: routes[0].via[0]: must be a switch name, got 3"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu1", "via": ["n0.sw"]})",
       R"(x.json: routes[0].via[0]: unknown switch "n0.sw")"},
      {R"({"src": "n0.gpu0", "dst": "n1.gpu1", "via": ["fabric", "n1.gpu0", "n1.switch"]})",
       R"(x.json: routes[0].via[1]: "n1.gpu0" is a GPU: a route never passes through another GPU)"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu1", "via": ["n0.switch", "fabric", "n0.switch"]})",
       R"(x.json: routes[0].via[2]: "n0.switch" comes twice: a route passes a switch once)"},
      {R"({"src": "n0.gpu0", "dst": "n1.gpu1", "via": ["n0.switch", "fabric"]})",
       R"(x.json: routes[0].via[1]: no link joins "n0.switch" and "fabric")"},
      {R"({"src": "n0.gpu0", "dst": "n1.gpu1", "via": ["n0.switch"]})",
       R"(x.json: routes[0].dst: no link joins "n0.switch" and "n1.gpu1")"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu1"})", R"(x.json: routes[0].dst: no link joins "n0.gpu0" and "n0.gpu1")"},
      {R"({"src": "n0.gpu0", "dst": "n0.gpu1", "via": ["fabric"]}, {"src": "n1.gpu0", "dst": "n1.gpu1", "via": ["fabric"]},
          {"src": "n0.gpu0", "dst": "n0.gpu1", "via": ["n0.switch"]})",
       R"(x.json: routes[2]: a second route from "n0.gpu0" to "n0.gpu1" (routes[0] is the first))"},
  };
  for (const auto& [routes, expected] : cases) {
    const auto m = err(small(routes));
    EXPECT_EQ(m, expected);
    EXPECT_EQ(m.find('\n'), std::string::npos);
  }
  EXPECT_EQ(err(small("{}", true)), R"(x.json: routes: must be an array of routes {"src", "dst", "via"})");
  // More hops than a flow's route holds.
  std::string sw, links = R"({"a": "gpu0", "b": "s0", "bandwidth_gbps": 1, "sharing": "shared"},
                             {"a": "gpu1", "b": "s0", "bandwidth_gbps": 1, "sharing": "shared"})";
  std::string via;
  for (int i = 0; i < 9; ++i) {
    sw += fmt::format("{}\"s{}\"", i ? ", " : "", i);
    if (i > 0)
      links += fmt::format(R"(, {{"a": "s{}", "b": "s{}", "bandwidth_gbps": 1, "sharing": "shared"}})", i - 1, i);
    via += fmt::format("{}\"s{}\"", i ? ", " : "", i);
  }
  links += R"(, {"a": "s8", "b": "gpu1", "bandwidth_gbps": 1, "sharing": "shared"})";
  EXPECT_EQ(err(R"({"gpu": {"tflops": 1}, "gpus": 2, "switches": [)" + sw + R"(], "links": [)" + links +
                R"(], "routes": [{"src": "gpu0", "dst": "gpu1", "via": [)" + via + "]}]}"),
            "x.json: routes[0].via: 10 hops, more than the 8 supported");
}

TEST(Routes, KindErrorsNameThePath) {
  EXPECT_EQ(
      err(R"({"gpu": {"tflops": 1}, "gpus": 2, "links": [{"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 1, "sharing": "shared", "kind": "qpi"}]})"),
      R"(x.json: links[0].kind: must be "nvlink", "pcie", "host", "nic" or "fabric", got "qpi")");
  EXPECT_EQ(
      err(R"({"gpu": {"tflops": 1}, "gpus": 2, "links": [{"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 1, "sharing": "shared", "kind": "pcie"},
                                                               {"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 1, "sharing": "shared"}]})"),
      "x.json: links[1].kind: missing, but links[0] has one: give every link a kind or none");
  EXPECT_EQ(
      err(R"({"gpu": {"tflops": 1}, "nodes": 1, "gpus_per_node": 2, "intra": {"bandwidth_gbps": 1, "kind": "nic"}})"),
      R"(x.json: intra.kind: must be "nvlink" or "pcie", got "nic")");
}

// `charm topo`: one pair hop by hop, every pair in a few groups, JSON on request.
charm::test::CmdResult run(const std::string& args) { return charm::test::run_charm(args); }

TEST(Routes, TopoCliShowsRoutes) {
  auto one = run("topo " + preset("h100-2x8.json") + " --route 0,9 --route n0.gpu3,n0.gpu5");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("route 0 -> 9 (n0.gpu0 -> n1.gpu1): nic, 2 hops, 42.5 GB/s, 16 us"), std::string::npos)
      << one.out;
  EXPECT_NE(one.out.find("n0.gpu0->fabric"), std::string::npos) << one.out;
  // The rate a lone flow attains (NCCL's published share of NVLink 4 for one peer in its default configuration, 0.18 of
  // the link) beside the links' bandwidth, and what all of a GPU's flows attain together (0.82).
  EXPECT_NE(one.out.find("route 3 -> 5 (n0.gpu3 -> n0.gpu5): nvlink, 2 hops, 64.9067 GB/s a flow (links 365.1 GB/s), "
                         "6 us"),
            std::string::npos)
      << one.out;
  EXPECT_NE(one.out.find("dedicated, 64.9067 GB/s per flow, 299.382 GB/s injection"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("n0.switch->n0.gpu5"), std::string::npos) << one.out;

  auto all = run("topo " + preset("h100-4x8.json") + " --routes");
  ASSERT_EQ(all.code, 0) << all.out;
  EXPECT_NE(all.out.find("992 ordered pairs in 2 groups"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("nvlink     224 pairs"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("nic        768 pairs"), std::string::npos) << all.out;
  EXPECT_LT(std::count(all.out.begin(), all.out.end(), '\n'), 10);  // 992 pairs, still a few lines

  auto j = run("topo " + preset("l20-8-2numa.json") + " --routes --json");
  ASSERT_EQ(j.code, 0) << j.out;
  const auto doc = json::parse(j.out);
  ASSERT_EQ(doc["routes"].size(), 56u);
  EXPECT_EQ(doc["routes"][3]["kind"], "host");  // 0 -> 4 crosses the NUMA nodes
  EXPECT_EQ(doc["links"][0]["kind"], "pcie");
  // Across the NUMA nodes a flow attains the host link's per-flow rate, below its bandwidth.
  EXPECT_LT(doc["routes"][3]["flow_gbps"].get<double>(), doc["routes"][3]["bandwidth_gbps"].get<double>());

  // Every pair of 65,536 GPUs is 4.3e9 routes (hours): refused before the first.
  auto big = run("topo " + std::string(CHARM_SOURCE_DIR) + "/tests/data/bad/topo-65536-gpus.json --routes --json");
  EXPECT_EQ(big.code, 2) << big.out;
  EXPECT_NE(big.out.find("more than the 65280 routes --routes --json lists; show pairs with --route SRC,DST"),
            std::string::npos)
      << big.out;

  for (const auto& [args, msg] : std::vector<std::pair<std::string, std::string>>{
           {"--route 0", "--route: '0': expected SRC,DST"},
           {"--route 0,99", "--route: '0,99': GPU 99 is not in [0, 16)"},
           {"--route 0,gpuX", "--route: '0,gpuX': 'gpuX' is neither a GPU index nor a GPU name"},
           {"--route 3,3", "--route: '3,3': a route joins two different GPUs"}}) {
    auto o = run("topo " + preset("h100-2x8.json") + " " + args);
    EXPECT_EQ(o.code, 2) << o.out;
    EXPECT_NE(o.out.find(msg), std::string::npos) << o.out;
    EXPECT_EQ(std::count(o.out.begin(), o.out.end(), '\n'), 1) << o.out;
  }
}

// Generated clusters and --uniform ones keep no GPU-by-GPU table: a route is the
// one between their first two nodes moved to the pair's nodes. Every route must be
// the one the search over the whole cluster picks (the table, kept when `blocks` is cleared).
TEST(Routes, RoutesByNodeAreTheSearchedRoutes) {
  const std::vector<json> inters = {
      json::parse(R"({"bandwidth_gbps": 40, "latency_us": 8, "sharing": "shared", "nic": "per_gpu"})"),
      json::parse(R"({"bandwidth_gbps": 40, "sharing": "shared", "nic": "per_node"})"),
      json::parse(R"({"bandwidth_gbps": 40, "sharing": "shared", "gpus_per_nic": 2})"),
      json::parse(R"({"bandwidth_gbps": 40, "sharing": "shared", "gpus_per_nic": 4, "pcie_gbps": 32})")};
  const std::vector<json> intras = {json::parse(R"({"bandwidth_gbps": 300, "sharing": "dedicated"})"),
                                    json::parse(R"({"bandwidth_gbps": 30, "sharing": "shared", "kind": "pcie"})")};
  int cases = 0;
  for (const int nodes : {2, 3, 5})
    for (const int per_node : {1, 2, 4, 8})
      for (const int numa : {1, 2, 4})
        for (std::size_t i = 0; i < inters.size(); ++i)
          for (const auto& intra : intras) {
            if (per_node % numa != 0) continue;
            if (inters[i].contains("gpus_per_nic") && per_node % inters[i]["gpus_per_nic"].get<int>() != 0) continue;
            json j = {{"gpu", {{"tflops", 100}}}, {"nodes", nodes}, {"gpus_per_node", per_node},
                      {"numa_per_node", numa},    {"intra", intra}, {"inter", inters[i]}};
            if (numa > 1) j["numa"] = {{"bandwidth_gbps", 20}, {"sharing", "shared"}};
            const Topology t = parse_json(j);
            ASSERT_TRUE(t.routes_by_block()) << j.dump();
            Topology full = t;
            full.blocks = {};
            ASSERT_TRUE(full.finalize(full.num_gpus(), "table").ok());
            ASSERT_FALSE(full.routes_by_block());
            EXPECT_EQ(table(t), table(full)) << j.dump();
            ++cases;
          }
  EXPECT_GT(cases, 100);
  // A fixed route applies to its pair alone, by block as in the table.
  json j = load_json(preset("h100-2x8.json"));
  j["nodes"] = 3;
  j["routes"] = json::parse(R"([{"src": "n2.gpu1", "dst": "n0.gpu3", "via": ["n2.switch", "n2.gpu0"]}])");
  EXPECT_NE(err(j.dump()).find("is a GPU"), std::string::npos);
  j["routes"] = json::parse(R"([{"src": "n2.gpu1", "dst": "n2.gpu3", "via": ["fabric"]}])");
  const Topology t = parse_json(j);
  ASSERT_TRUE(t.routes_by_block());
  EXPECT_TRUE(t.route_overridden(17, 19) && t.route_overridden(19, 17) && !t.route_overridden(1, 3));
  EXPECT_EQ(path(t, 17, 19), "n2.gpu1 fabric n2.gpu3");
  EXPECT_EQ(path(t, 1, 3), "n0.gpu1 n0.switch n0.gpu3");
  Topology full = t;
  full.blocks = {};
  ASSERT_TRUE(full.finalize(full.num_gpus(), "table").ok());
  EXPECT_EQ(table(t), table(full));
  // --uniform: GPU -> switch -> GPU.
  for (const int n : {2, 3, 7}) {
    const Topology u = make_uniform(n, 100, 100, 2);
    ASSERT_TRUE(u.routes_by_block());
    Topology uf = u;
    uf.blocks = {};
    ASSERT_TRUE(uf.finalize(n, "table").ok());
    EXPECT_EQ(table(u), table(uf));
    EXPECT_EQ(path(u, n - 1, 0), fmt::format("gpu{} fabric gpu0", n - 1));
  }
}

// A claimed block structure that does not hold (a link that is no copy of the first
// node's) is not believed: routes come from the table.
TEST(Routes, AWrongBlockClaimFallsBackToTheTable) {
  json j = load_json(preset("h100-2x8.json"));
  j["nodes"] = 3;
  Topology t = parse_json(j);
  ASSERT_TRUE(t.routes_by_block());
  const auto expected = table(t);
  t.blocks.links -= 1;  // no longer a whole node
  ASSERT_TRUE(t.finalize(t.num_gpus(), "claim").ok());
  EXPECT_FALSE(t.routes_by_block());
  EXPECT_EQ(table(t), expected);
  Topology u = parse_json(j);
  std::swap(u.links[0].kind, u.links[u.links.size() - 1].kind);  // node 0's first link differs from the others'
  ASSERT_TRUE(u.finalize(u.num_gpus(), "claim").ok());
  EXPECT_FALSE(u.routes_by_block());
}

// A generated cluster is no longer held to 4096 GPUs; an explicit one is.
TEST(Routes, LargeGeneratedClustersLoad) {
  json j = load_json(preset("h100-2x8.json"));
  j["nodes"] = 1024;  // 8,192 GPUs
  const Topology t = parse_json(j);
  ASSERT_EQ(t.num_gpus(), 8192);
  EXPECT_TRUE(t.routes_by_block());
  EXPECT_EQ(path(t, 8191, 5), "n1023.gpu7 fabric n0.gpu5");
  EXPECT_EQ(path(t, 8190, 8185), "n1023.gpu6 n1023.switch n1023.gpu1");
  EXPECT_EQ(t.route_kind(0, 8191), LinkKind::Nic);
  j["nodes"] = 8193;
  EXPECT_NE(err(j.dump()).find("at most 65536 GPUs are supported"), std::string::npos);
}

}  // namespace
}  // namespace charm::topo
