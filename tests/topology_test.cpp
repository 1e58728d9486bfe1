// Topology loader: explicit and generator forms, routes, domains, and one-line errors naming the field.
#include <gtest/gtest.h>

#include "topologies/topology_json.hpp"

namespace charm::topo {
namespace {

std::string err(const std::string& text) {
  auto t = parse_topology_text(text, "x.json");
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.error().message();
}

const char* kGpu = R"("gpu": {"tflops": 100})";

TEST(Topology, GeneratorTwoNodes) {
  auto t = parse_topology_text(std::string("{") + kGpu + R"(, "nodes": 2, "gpus_per_node": 4,
      "intra": {"bandwidth_gbps": 300, "latency_us": 2}, "inter": {"bandwidth_gbps": 40, "latency_us": 5}})",
                               "g");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->num_gpus(), 8);
  EXPECT_EQ(t->domains(), 2);
  EXPECT_EQ(t->domain_of(5), 1);
  EXPECT_EQ(t->route(0, 1).size(), 2u);  // through the node's switch
  EXPECT_DOUBLE_EQ(t->route_bandwidth_gbps(0, 1), 300);
  EXPECT_DOUBLE_EQ(t->route_bandwidth_gbps(0, 4), 40);  // NIC -> fabric -> NIC
  EXPECT_DOUBLE_EQ(t->route_latency_us(0, 4), 10);
}

TEST(Topology, GeneratorNuma) {
  auto t = parse_topology_text(std::string("{") + kGpu + R"(, "nodes": 1, "gpus_per_node": 8, "numa_per_node": 2,
      "intra": {"bandwidth_gbps": 24, "sharing": "shared"}, "numa": {"bandwidth_gbps": 14.7}, "domain": "numa"})",
                               "g");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->domains(), 2);
  EXPECT_EQ(t->route(0, 5).size(), 4u);  // gpu -> numa switch -> host -> numa switch -> gpu
  EXPECT_DOUBLE_EQ(t->route_bandwidth_gbps(0, 5), 14.7);
  EXPECT_DOUBLE_EQ(t->route_bandwidth_gbps(0, 3), 24);
}

TEST(Topology, PresetsLoad) {
  for (const char* f : {"l20-4", "l20-8-2numa", "h20-8", "h20-2x8", "h100-2x8", "h100-4x8", "h200-2x8"}) {
    auto t = load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/" + f + ".json");
    ASSERT_TRUE(t.ok()) << f << ": " << t.error().message();
    EXPECT_FALSE(t->notes.empty()) << f;
  }
  auto h = load_topology(std::string(CHARM_SOURCE_DIR) + "/topologies/h100-4x8.json");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->num_gpus(), 32);
  EXPECT_EQ(h->domains(), 4);
}

TEST(Topology, UnreachableGpu) {
  const auto m = err(std::string("{") + kGpu + R"(, "gpus": 3, "switches": ["sw"], "links": [
      {"a": "gpu0", "b": "sw", "bandwidth_gbps": 10, "sharing": "shared"},
      {"a": "gpu1", "b": "sw", "bandwidth_gbps": 10, "sharing": "shared"}]})");
  EXPECT_NE(m.find("x.json"), std::string::npos) << m;
  EXPECT_NE(m.find("gpu2 is unreachable"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(Topology, NonPositiveBandwidthNamesThePath) {
  const auto m = err(std::string("{") + kGpu + R"(, "gpus": 2, "links": [
      {"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 10, "sharing": "shared"},
      {"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 10, "sharing": "shared"},
      {"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 10, "sharing": "shared"},
      {"a": "gpu0", "b": "gpu1", "bandwidth_gbps": -5, "sharing": "shared"}]})");
  EXPECT_EQ(m, "x.json: links[3].bandwidth_gbps: must be > 0, got -5");
}

TEST(Topology, MissingField) {
  EXPECT_EQ(
      err(std::string("{") + kGpu + R"(, "gpus": 2, "links": [{"a": "gpu0", "b": "gpu1", "sharing": "shared"}]})"),
      "x.json: links[0].bandwidth_gbps: missing required field");
  EXPECT_EQ(err(R"({"gpus": 2, "links": []})"), "x.json: gpu: missing required field");
  EXPECT_EQ(err(std::string("{") + kGpu + R"(, "nodes": 2, "gpus_per_node": 8, "intra": {"bandwidth_gbps": 300}})"),
            "x.json: inter: missing required field");
}

TEST(Topology, BadValues) {
  EXPECT_EQ(err(std::string("{") + kGpu +
                R"(, "gpus": 2, "links": [{"a": "gpu0", "b": "gpuX", "bandwidth_gbps": 1, "sharing": "shared"}]})"),
            "x.json: links[0].b: unknown GPU or switch \"gpuX\"");
  EXPECT_EQ(err(std::string("{") + kGpu +
                R"(, "gpus": 2, "links": [{"a": "gpu0", "b": "gpu1", "bandwidth_gbps": 1, "sharing": "fast"}]})"),
            "x.json: links[0].sharing: must be \"shared\" or \"dedicated\", got \"fast\"");
  EXPECT_EQ(err(R"({"gpu": {"tflops": {"bf16": 0}}, "gpus": 1, "links": []})"),
            "x.json: gpu.tflops.bf16: must be > 0, got 0");
}

TEST(Topology, MalformedJson) {
  const auto m = err("{\"gpu\": {\"tflops\": 1}, \"gpus\": 2,, }");
  EXPECT_EQ(m.rfind("x.json: malformed JSON: parse error at line 1", 0), 0u) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(Topology, Uniform) {
  const auto t = make_uniform(16, 50, 100);
  EXPECT_EQ(t.num_gpus(), 16);
  EXPECT_EQ(t.route(3, 9).size(), 2u);
  EXPECT_DOUBLE_EQ(t.route_bandwidth_gbps(3, 9), 50);
}

}  // namespace
}  // namespace charm::topo
