// The kernel's shape and the stack's per-block costs: exact times with the arithmetic beside them.
#include <gtest/gtest.h>

#include "sim/compute_model.hpp"
#include "topologies/gpu_arch.hpp"
#include "topologies/topology_json.hpp"

namespace charm::sim {
namespace {

using ir::MaskPiece;
using ir::Phase;

/// 132 SMs of 1 TFLOP/s each (peak 132e12), tiles 128 x 64 forward and 64 x 64 backward, efficiency 1.
ComputeModel tiled() {
  ComputeModel m;
  m.peak_flops = 132e12;
  m.sm_count = 132;
  m.tile_fwd = {128, 64};
  m.tile_bwd = {64, 64};
  return m;
}

ir::Workload one_head(std::int64_t batch_heads) {
  ir::Workload w;
  w.batch = batch_heads;
  w.heads = 1;
  w.kv_heads = 1;
  w.head_dim = 64;
  return w;
}

/// FLOPs of a full q x kv block: 4 * D per pair forward, 10 * D backward.
double full_flops(const ir::Workload& w, double q, double kv, Phase ph) {
  return (ph == Phase::Fwd ? 4.0 : 10.0) * double(w.head_dim) * q * kv * double(w.batch * w.heads);
}

TEST(ComputeModel, FullBlockIsWavesOfTiles) {
  const auto m = tiled();
  // One batch-head, 256 x 256: 2 query tiles (2 thread blocks, one wave) of 4 key tiles each = 4 tile
  // steps; a tile is 4*64*128*64 = 2,097,152 FLOPs on one SM of 1e12 FLOP/s: 2.097152 us; 8.388608 us.
  const auto w1 = one_head(1);
  EXPECT_DOUBLE_EQ(m.compute_seconds(full_flops(w1, 256, 256, Phase::Fwd), Phase::Fwd, w1), 4 * 2.097152e-6);
  // 132 batch-heads: 264 thread blocks on 132 SMs, two waves: 8 steps, 16.777216 us.
  const auto w132 = one_head(132);
  EXPECT_DOUBLE_EQ(m.compute_seconds(full_flops(w132, 256, 256, Phase::Fwd), Phase::Fwd, w132), 8 * 2.097152e-6);
  // 133 batch-heads: 266 thread blocks need three waves though only 2 SMs work in the last: 12 steps.
  const auto w133 = one_head(133);
  EXPECT_DOUBLE_EQ(m.compute_seconds(full_flops(w133, 256, 256, Phase::Fwd), Phase::Fwd, w133), 12 * 2.097152e-6);
  // 200 x 200 pads to the same tiles as 256 x 256: a partial tile costs a whole one.
  EXPECT_DOUBLE_EQ(m.compute_seconds(full_flops(w1, 200, 200, Phase::Fwd), Phase::Fwd, w1), 4 * 2.097152e-6);
}

TEST(ComputeModel, CausalDiagonalAtTileGranularity) {
  const auto m = tiled();
  // 256 tokens, lower triangle: 256*257/2 = 32,896 visible pairs. Query tile 0 sees key tiles up to 128
  // (2 of 64), tile 1 up to 256 (4): 6 steps of work, but one batch-head runs its longest loop alone: 4 steps.
  const auto w1 = one_head(1);
  const double pairs = 256.0 * 257 / 2;
  EXPECT_DOUBLE_EQ(m.compute_seconds(4 * 64 * pairs, Phase::Fwd, w1, MaskPiece::Causal), 4 * 2.097152e-6);
  // 132 batch-heads: 132 * 6 = 792 steps over 132 SMs = 6 per SM, not half of the full block's 8.
  const auto w132 = one_head(132);
  EXPECT_DOUBLE_EQ(m.compute_seconds(4 * 64 * pairs * 132, Phase::Fwd, w132, MaskPiece::Causal), 6 * 2.097152e-6);
}

TEST(ComputeModel, BackwardTilesTheKeys) {
  const auto m = tiled();
  // Backward, 256 x 256, one batch-head: 4 key tiles of 64 (4 thread blocks) loop over 4 query tiles of 64:
  // 4 steps of 10*64*64*64 = 2,621,440 FLOPs at 1e12: 10.48576 us.
  const auto w1 = one_head(1);
  EXPECT_DOUBLE_EQ(m.compute_seconds(full_flops(w1, 256, 256, Phase::Bwd), Phase::Bwd, w1), 4 * 2.62144e-6);
}

TEST(ComputeModel, LargeBlocksTendToPeakTimesEfficiency) {
  auto m = tiled();
  m.efficiency_fwd = 0.5;
  const auto w = one_head(132 * 4);
  const double f = full_flops(w, 8192, 8192, Phase::Fwd);
  // 64 query tiles x 528 batch-heads = 256 whole waves of 128 key tiles: exactly flops / (peak * 0.5).
  EXPECT_NEAR(m.compute_seconds(f, Phase::Fwd, w) / (f / (132e12 * 0.5)), 1.0, 1e-12);
}

TEST(ComputeModel, StackStepAndUpdateCosts) {
  auto m = tiled();
  m.step_s = 80e-6;
  m.update_passes = 2;
  m.bwd_update_passes = 2;
  m.hbm_bytes_per_s = 1e12;
  // The 256 x 256 block above (8.388608 us) + 80 us per step + the update of its 256 x 64 fp32 outputs:
  // 2 passes x 12 bytes x 16,384 elements / 1e12 B/s = 0.393216 us.
  const auto w1 = one_head(1);
  EXPECT_DOUBLE_EQ(m.compute_seconds(full_flops(w1, 256, 256, Phase::Fwd), Phase::Fwd, w1),
                   4 * 2.097152e-6 + 80e-6 + 0.393216e-6);
  // Backward updates dQ (256 x 64) and dK, dV (2 x 256 x 64): three times the elements, 1.179648 us.
  EXPECT_DOUBLE_EQ(m.compute_seconds(full_flops(w1, 256, 256, Phase::Bwd), Phase::Bwd, w1),
                   4 * 2.62144e-6 + 80e-6 + 1.179648e-6);
  // A merge of the plan moves merge_traffic fused passes, 3 x 1 MB at 1e12 B/s = 3 us, and the framework
  // pays its per-op cost for it too: 83 us.
  m.merge_traffic = 3;
  ir::Op merge;
  merge.kind = ir::OpKind::Merge;
  merge.bytes = 1'000'000;
  EXPECT_DOUBLE_EQ(m.op_seconds(merge, w1), 3e-6 + 80e-6);
}

TEST(ComputeModel, KnownGpusGetTheirDatasheetShape) {
  ASSERT_TRUE(topo::gpu_arch("NVIDIA H100 SXM"));
  EXPECT_EQ(topo::gpu_arch("NVIDIA H100 SXM")->sm_count, 132);
  EXPECT_EQ(topo::gpu_arch("NVIDIA H100 PCIe")->sm_count, 114);
  EXPECT_EQ(topo::gpu_arch("NVIDIA H200")->sm_count, 132);  // not H20's
  EXPECT_EQ(topo::gpu_arch("NVIDIA H20")->sm_count, 78);
  EXPECT_EQ(topo::gpu_arch("nvidia a100-sxm4-80gb")->sm_count, 108);
  EXPECT_FALSE(topo::gpu_arch("uniform"));
  // A file that names the model inherits them, its family's kernel table (the default stack's library) and
  // NCCL's published NVLink 3 attainment (232 of 300 GB/s per GPU); --uniform keeps the ideal stack.
  auto t = topo::parse_topology_text(
      R"({"gpu": {"model": "NVIDIA A100", "tflops": 312}, "nodes": 1, "gpus_per_node": 8,
          "intra": {"bandwidth_gbps": 300, "sharing": "dedicated"}})",
      "a100.json");
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->gpu.sm_count, 108);
  ASSERT_TRUE(t->gpu.kernel);
  EXPECT_EQ(t->gpu.kernel->library, "fa2");
  EXPECT_EQ(t->gpu.family, "ampere");
  EXPECT_EQ(t->stack.preset, "te-fused");
  EXPECT_DOUBLE_EQ(t->links.front().injection_gbps, 232);
  EXPECT_EQ(topo::make_uniform(4, 100, 100).stack.preset, "none");
}

TEST(ComputeModel, CompleteDocumentSpellsOutEveryDefault) {
  auto doc = nlohmann::json::parse(
      R"({"gpu": {"model": "NVIDIA H200", "tflops": 989}, "nodes": 2, "gpus_per_node": 8,
          "intra": {"bandwidth_gbps": 450, "sharing": "dedicated"},
          "inter": {"bandwidth_gbps": 50, "sharing": "shared"}})");
  const auto before = topo::parse_topology(doc, "h200.json");
  ASSERT_TRUE(before);
  ASSERT_TRUE(topo::complete_document(doc, "h200.json"));
  EXPECT_DOUBLE_EQ(doc["intra"]["injection_gbps"].get<double>(), 369);  // NCCL's 0.82 of NVLink 4's 450
  EXPECT_DOUBLE_EQ(doc["intra"]["per_flow_gbps"].get<double>(), 80);    // ... and 0.18 for one peer
  EXPECT_EQ(doc["gpu"]["kernel"]["library"].get<std::string>(), "fa3");
  EXPECT_DOUBLE_EQ(doc["gpu"]["kernel_scale"]["fwd"].get<double>(), 1);
  EXPECT_EQ(doc["gpu"]["sm_count"].get<int>(), 132);
  EXPECT_EQ(doc["gpu"]["kernel"]["fwd"]["tile_q"].get<int>(), 128);
  EXPECT_DOUBLE_EQ(doc["stack"]["step_us"].get<double>(), before->stack.step_us);
  // The same cluster after: every link, the GPU and the stack as before.
  const auto after = topo::parse_topology(doc, "h200.json");
  ASSERT_TRUE(after);
  ASSERT_EQ(after->links.size(), before->links.size());
  for (std::size_t i = 0; i < after->links.size(); ++i) {
    EXPECT_EQ(after->links[i].injection_gbps, before->links[i].injection_gbps);
    EXPECT_EQ(after->links[i].per_flow_gbps, before->links[i].per_flow_gbps);
  }
  EXPECT_EQ(after->stack.message_us, before->stack.message_us);
  EXPECT_EQ(after->gpu.efficiency_fwd, before->gpu.efficiency_fwd);
  ASSERT_TRUE(after->gpu.kernel);
  EXPECT_EQ(after->gpu.kernel->library, before->gpu.kernel->library);
}

}  // namespace
}  // namespace charm::sim
