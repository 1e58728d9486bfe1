// What an attention block pays for tensor parallelism, and the advise / compare / sweep reports built on it:
//  - the TP block's cost on a uniform cluster is the ring formula and the projections' FLOPs, figure for figure;
//  - concurrent TP groups share the links they meet (a PCIe switch), and a collective is not held to a lone
//    point-to-point flow's per-peer cap;
//  - on a PCIe box advise's TP rows carry their collectives, compare shows them per pass, and the scope says so;
//  - a schedule no framework runs that leads is followed by the best runnable row; identical rows merge;
//  - sweep takes simulate's defaults and sweeps --tp and --cp; implausible link rates warn with the slip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "sim/evaluate.hpp"
#include "sim/tensor_parallel.hpp"
#include "test_util.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {
namespace {

using nlohmann::json;
using test::run_charm;

json node(double bw, const char* sharing, double injection = 0, double per_flow = 0) {
  json intra = {{"bandwidth_gbps", bw}, {"latency_us", 2}, {"sharing", sharing}};
  if (injection > 0) intra["injection_gbps"] = injection;
  if (per_flow > 0) intra["per_flow_gbps"] = per_flow;
  return {{"name", "node"},
          {"gpu", {{"model", "gpu"}, {"tflops", 100}, {"efficiency", 0.5}, {"gemm_efficiency", 0.8}}},
          {"stack", {{"preset", "none"}, {"message_us", 5}}},
          {"nodes", 1},
          {"gpus_per_node", 8},
          {"intra", intra}};
}

/// Two NUMA nodes of 4 GPUs under PCIe switches, joined by one shared 40 GB/s bridge.
json two_numa_nodes() {
  json numa = node(100, "shared");
  numa["numa_per_node"] = 2;
  numa["numa"] = {{"bandwidth_gbps", 40}, {"latency_us", 4}, {"sharing", "shared"}};
  return numa;
}

ir::Workload workload(ir::PassKind pass) {
  ir::Workload w;
  w.batch = 2;
  w.seq = 32768;
  w.heads = 32;
  w.kv_heads = 8;
  w.head_dim = 128;
  w.pass = pass;
  return w;
}

TEST(TpBlock, RingFormulaAndProjectionFlopsOnADedicatedNode) {
  auto t = topo::parse_topology(node(100, "dedicated"), "node");
  ASSERT_TRUE(t.ok()) << t.error().message();
  const auto l = sched::make_layout(8, 2, 4, sched::LayoutOrder::TpInner).value();
  const auto c = tp_block_cost(workload(ir::PassKind::Fwd), l, *t).value();
  const double tokens = 2.0 * 32768 / 2, hidden = 32 * 128.0, elem = 2;
  const double shard = tokens / 4 * hidden * elem;
  EXPECT_DOUBLE_EQ(c.shard_bytes, shard);
  EXPECT_NEAR(c.ring_gbps, 100, 1e-9);                              // every ring flow on its own dedicated link
  const double collective = 3 * (shard / 100e9 + 2 * 2e-6 + 5e-6);  // 3 steps: wire, two hops' latency, message
  EXPECT_NEAR(c.gather_s, collective, 1e-12);
  EXPECT_NEAR(c.scatter_s, collective, 1e-12);
  const double rate = 100e12 * 0.8;
  const double qkv = 2 * tokens * hidden * (32 + 2 * 8) * 128 / 4 / rate, out = 2 * tokens * hidden / 4 * hidden / rate;
  EXPECT_NEAR(c.gemm_s, qkv + out, 1e-12);
  EXPECT_EQ(c.all_gathers, 1);
  EXPECT_EQ(c.reduce_scatters, 1);
  EXPECT_EQ(c.ring_link, "nvlink");

  // Backward: the output gradient's gather, the re-gather beside the QKV data gradient, the reduce-scatter beside
  // its weight gradient; twice the GEMM FLOPs.
  const auto b = tp_block_cost(workload(ir::PassKind::Bwd), l, *t).value();
  EXPECT_EQ(b.all_gathers, 2);
  EXPECT_EQ(b.reduce_scatters, 1);
  EXPECT_NEAR(b.gemm_s, 2 * (qkv + out), 1e-12);
  EXPECT_NEAR(b.gather_s + b.scatter_s + b.hidden_comm_s, 3 * collective, 1e-12);
  const auto both = tp_block_cost(workload(ir::PassKind::Both), l, *t).value();
  EXPECT_NEAR(both.total_s(), c.total_s() + b.total_s(), 1e-12);

  // TP 1 on CP 8: no collectives; a quarter of the tokens per rank, each with all the columns: the same GEMM time.
  const auto one = tp_block_cost(workload(ir::PassKind::Fwd), sched::make_layout(8, 8, 1, {}).value(), *t).value();
  EXPECT_EQ(one.gather_s + one.scatter_s, 0);
  EXPECT_NEAR(one.gemm_s, qkv + out, 1e-12);
}

TEST(TpBlock, GroupsShareABridgeAndCollectivesPassThePerPeerCap) {
  // TP 2 with CP innermost pairs GPU c with GPU c + 4: all four TP groups' flows of one direction divide the bridge.
  auto shared = topo::parse_topology(two_numa_nodes(), "node");
  ASSERT_TRUE(shared.ok()) << shared.error().message();
  const auto across = sched::make_layout(8, 4, 2, sched::LayoutOrder::CpInner).value();
  const auto c = tp_block_cost(workload(ir::PassKind::Fwd), across, *shared).value();
  EXPECT_NEAR(c.ring_gbps, 40.0 / 4, 1e-9);
  EXPECT_EQ(c.ring_link, "host");
  // TP peers adjacent (TP innermost): every pair under one switch, each flow on its own GPU links.
  const auto l = sched::make_layout(8, 4, 2, sched::LayoutOrder::TpInner).value();
  EXPECT_NEAR(tp_block_cost(workload(ir::PassKind::Fwd), l, *shared)->ring_gbps, 100, 1e-9);
  // NVLink with NCCL's per-GPU injection 80 and a per-peer cap of 20: a collective reaches the injection rate.
  auto capped = topo::parse_topology(node(100, "dedicated", 80, 20), "node");
  ASSERT_TRUE(capped.ok()) << capped.error().message();
  EXPECT_NEAR(tp_block_cost(workload(ir::PassKind::Fwd), l, *capped)->ring_gbps, 80, 1e-9);
}

TEST(TpBlock, IsLoweredWithEveryRingHopRoutedBeforeItIsPriced) {
  auto t = topo::parse_topology(two_numa_nodes(), "node");
  ASSERT_TRUE(t.ok()) << t.error().message();
  const auto across = sched::make_layout(8, 4, 2, sched::LayoutOrder::CpInner).value();
  const auto b = lower_tp_block(workload(ir::PassKind::Fwd), across, *t).value();
  // One flow a GPU: TP rank k of CP rank c's group to rank k + 1, GPU c to c + 4 and back, over the bridge.
  ASSERT_EQ(b.ring.size(), 8u);
  const auto hops = sched::tp_ring_hops(across);
  for (std::size_t i = 0; i < hops.size(); ++i) {
    const topo::Route route = t->route(hops[i].from, hops[i].to);
    EXPECT_TRUE(b.ring[i].route == route) << i;
    EXPECT_DOUBLE_EQ(b.ring[i].latency_s, t->latency_us(route) * 1e-6);
    EXPECT_GT(b.ring[i].latency_s, 4e-6);  // the bridge and the GPUs' links to it
  }
  // Priced from the lowered flows alone, it is the cost the one-call form gives.
  const TpBlockCost c = tp_block_cost(b, *t);
  EXPECT_EQ(c.total_s(), tp_block_cost(workload(ir::PassKind::Fwd), across, *t)->total_s());
  EXPECT_NEAR(c.ring_gbps, 40.0 / 4, 1e-9);
  // TP 1 has no ring; a layout larger than the topology is --tp's error.
  EXPECT_TRUE(lower_tp_block(workload(ir::PassKind::Fwd), sched::make_layout(8, 8, 1, {}).value(), *t)->ring.empty());
  const auto big = lower_tp_block(workload(ir::PassKind::Fwd), sched::make_layout(16, 8, 2, {}).value(), *t);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.error().field, Field::Tp);
}

TEST(TpBlock, GemmEfficiencyComesFromTheFileTheArchOrIsAssumedAloud) {
  auto t = topo::parse_topology(node(100, "dedicated"), "node");
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(gemm_efficiency(t->gpu), 0.8);
  EXPECT_EQ(gemm_source(t->gpu), "the file's gpu.gemm_efficiency");
  topo::GpuSpec h100;
  h100.model = "NVIDIA H100 SXM";
  EXPECT_NEAR(gemm_efficiency(h100), 0.803, 1e-12);
  EXPECT_NE(gemm_source(h100).find("MAMF"), std::string::npos);
  topo::GpuSpec odd;
  odd.model = "Some Accelerator";
  EXPECT_DOUBLE_EQ(gemm_efficiency(odd), topo::kAssumedGemmEfficiency);
  EXPECT_EQ(gemm_source(odd).rfind("assumed:", 0), 0u);
}

TEST(TpBlockCli, APcieBoxCarriesItsTpCollectivesInAdviseAndCompare) {
  const std::string box = std::string(CHARM_SOURCE_DIR) + "/tests/data/l40s-8.json";
  const std::string model = std::string(CHARM_SOURCE_DIR) + "/tests/data/llama70b-config.json";
  auto adv = run_charm("advise -t " + box + " --model " + model + " --seq 32k --causal --tp-search 1,8 --json");
  ASSERT_EQ(adv.code, 0) << adv.out;
  const json j = json::parse(adv.out.substr(adv.out.find('{')));
  EXPECT_NE(j["scope"].get<std::string>().find("all-gathers and reduce-scatters"), std::string::npos);
  bool tp8 = false, tp1 = false;
  for (const auto& c : j["candidates"]) {
    if (!c.contains("deployment")) continue;
    const int tp = c["deployment"]["tp"];
    const auto& fwd = c["tensor_parallel"]["fwd"];
    if (tp == 8) {
      tp8 = true;
      EXPECT_GT(fwd["all_gather_ms"].get<double>(), 0);
      EXPECT_GT(fwd["reduce_scatter_ms"].get<double>(), 0);
      EXPECT_EQ(c["tensor_parallel"]["bwd"]["all_gathers"], 2);
      if (c["algo"] == "ring") {
        EXPECT_NE(c["frameworks"]["megatron_lm"].get<std::string>().find("--tensor-model-parallel-size 8 "),
                  std::string::npos);
      }
    } else {
      tp1 = true;
      EXPECT_EQ(fwd["all_gather_ms"].get<double>(), 0);
      EXPECT_GT(fwd["gemm_ms"].get<double>(), 0);
    }
  }
  EXPECT_TRUE(tp8 && tp1);

  auto cmp = run_charm("compare -t " + box + " --model " + model + " --seq 32k --causal --tp 8 --algos ring");
  ASSERT_EQ(cmp.code, 0) << cmp.out;
  EXPECT_NE(cmp.out.find("of which TP"), std::string::npos) << cmp.out;
  EXPECT_NE(cmp.out.find("# tensor parallel (fwd): TP 8 over"), std::string::npos) << cmp.out;
  EXPECT_NE(cmp.out.find("# tensor parallel (bwd): TP 8 over"), std::string::npos) << cmp.out;
  // Without --tp the scope is core attention's, as before.
  auto core = run_charm("compare -t " + box + " --seq 32k --heads 8 --algos ring");
  ASSERT_EQ(core.code, 0) << core.out;
  EXPECT_NE(core.out.find("no projections, no TP collectives"), std::string::npos);
}

TEST(AdviseCli, ANonRunnableLeaderIsFollowedByTheBestRunnableRow) {
  const std::string t = std::string(CHARM_SOURCE_DIR) + "/topologies/h200-2x8.json";
  auto r = run_charm("advise -t " + t + " --seq 64k --heads 32 --algos charm,ring --top 3");
  ASSERT_EQ(r.code, 0) << r.out;
  if (r.out.find("# best: charm") != std::string::npos) {
    EXPECT_NE(r.out.find("# best runnable: ring"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--context-parallel-size 16 --cp-comm-type p2p"), std::string::npos) << r.out;
  }
  auto only = run_charm("advise -t " + t + " --seq 64k --heads 32 --algos charm,ring --runnable");
  ASSERT_EQ(only.code, 0) << only.out;
  EXPECT_EQ(only.out.find("charm d="), std::string::npos) << only.out;
  EXPECT_NE(only.out.find("without a framework counterpart left out (--runnable)"), std::string::npos) << only.out;
  // 80 layers of a long sequence: the table in seconds, per model, the why line per layer.
  auto big = run_charm("advise -t " + t + " --seq 256k --heads 32 --algos ring --layers 80");
  ASSERT_EQ(big.code, 0) << big.out;
  EXPECT_NE(big.out.find("total s"), std::string::npos) << big.out;
  EXPECT_NE(big.out.find("per model (80 layers)"), std::string::npos) << big.out;
  EXPECT_NE(big.out.find("#   why (each layer):"), std::string::npos) << big.out;
}

TEST(AdviseCli, IdenticalCandidatesAreOneRowWithTheirVariantsNamed) {
  // Without a mask ring and ring-zigzag are one candidate already; on a uniform cluster allgather-kv's gathered
  // KV and ring's rotation can still differ, but a one-GPU group's candidates are all one kernel.
  const std::string t = std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json";
  auto r = run_charm("advise -t " + t + " --seq 16k --heads 32 --tp-search 16 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["candidates"].size(), 1u) << r.out;
}

TEST(SweepCli, TakesSimulatesDefaultsAndSweepsTpAndCp) {
  const std::string t = std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json";
  const std::string csv = test::temp_path("tp-sweep.csv");
  auto r = run_charm("sweep -t " + t + " --seq 16k --heads 16 --tp 1,2,4 --algos ring,charm --out " + csv);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string text = test::read_text(csv);
  EXPECT_EQ(text.rfind("topology,ranks,domains,tp,cp,batch,", 0), 0u) << text;
  for (const char* tp : {",1,16,", ",2,8,", ",4,4,"}) EXPECT_NE(text.find(tp), std::string::npos) << tp << "\n" << text;
  // No output named: the CSV on stdout (the command as a user types it).
  auto plain = test::run_cmd("{ " + std::string(CHARM_BIN) + " sweep -t " + std::string(CHARM_SOURCE_DIR) +
                             "/topologies/h100-4x8.json --seq 64k,128k --tp 1,2,4 --algos ring,charm 2>/dev/null; }");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(plain.out.rfind("topology,ranks,domains,tp,cp,batch,", 0), 0u) << plain.out;
  EXPECT_EQ(std::count(plain.out.begin(), plain.out.end(), '\n'), 1 + 2 * 3 * 2) << plain.out;
  auto cp = run_charm("sweep -t " + t + " --seq 16k --cp 8 -d 2 --algos charm --json");
  ASSERT_EQ(cp.code, 0) << cp.out;
  const json rows = json::parse(cp.out.substr(cp.out.find('{')))["rows"];
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0]["cp"], 8);
  EXPECT_EQ(rows[0]["domains"], 2);
}

TEST(UnitSlip, ImplausibleRatesWarnWithTheLikelySlip) {
  const std::string f = test::temp_path("nic400.json");
  json doc = {{"name", "x"},
              {"gpu", {{"model", "NVIDIA H100 SXM"}, {"tflops", 989}}},
              {"nodes", 2},
              {"gpus_per_node", 8},
              {"intra", {{"bandwidth_gbps", 900}, {"sharing", "dedicated"}}},
              {"inter", {{"bandwidth_gbps", 400}, {"sharing", "shared"}}}};
  test::write_text(f, doc.dump());
  auto r = run_charm("simulate -t " + f + " --algo ring --seq 8k");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("more than any NIC carries"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("more than NVLink 4 carries per GPU (450 GB/s; its datasheet's 900"), std::string::npos)
      << r.out;
  const std::string t = std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json";
  auto s = run_charm("sweep -t " + t + " --seq 8k --algos ring --set inter.bandwidth_gbps=50,400 --json");
  ASSERT_EQ(s.code, 0) << s.out;
  EXPECT_NE(s.out.find("warning: --set inter.bandwidth_gbps=400: "), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("inter.bandwidth_gbps=50: "), std::string::npos) << s.out;
}

}  // namespace
}  // namespace charm::sim
