// The kernel's shape and the stack's per-block costs: exact times with the arithmetic beside them.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "sim/compute_model.hpp"
#include "sim/varlen_tiles.hpp"
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

// ---------------------------------------------------------------------------
// Blocks of packed documents and sliding windows, as a varlen kernel runs them.

/// A compute op of the block q_rank x kv_rank of `w` (its FLOPs counted by the workload, as the planners do).
ir::Op positions_op(const ir::Workload& w, int q_rank, int kv_rank, int ranks, Phase ph) {
  ir::Op op;
  op.kind = ir::OpKind::Compute;
  op.phase = ph;
  op.mask = MaskPiece::Positions;
  op.q_owner = q_rank;
  op.kv_owner = kv_rank;
  op.flops = w.block_flops(ph, q_rank, kv_rank, ranks);
  return op;
}

// The pieces hold every visible pair of their block, and only those: on random documents, windows and layouts,
// their pairs sum to the workload's own count for every (q shard, kv shard) block. The shards a simulation keeps
// (DocumentShards, its pieces' storage reused from block to block) give the same pieces as a fresh cut.
TEST(VarlenTiles, PiecesHoldEveryVisiblePairOfTheirBlock) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int ranks = 1 + int(rng() % 4);
    ir::Workload w = one_head(1);
    w.causal = true;
    w.layout = trial % 2 ? ir::Layout::Zigzag : ir::Layout::Contiguous;
    const std::int64_t unit = 2 * ranks;  // zigzag's THD chunks: every document a multiple of 2 x ranks tokens
    w.seq = 0;
    for (int d = 0, docs = 1 + int(rng() % 6); d < docs; ++d) {
      w.documents.push_back(unit * (1 + std::int64_t(rng() % 40)));
      w.seq += w.documents.back();
    }
    if (trial % 3 == 0) w.window = 1 + std::int64_t(rng() % std::uint64_t(std::min<std::int64_t>(100, w.seq)));
    if (trial % 5 == 0) w.documents.clear();  // a window alone over the whole sequence
    if (w.documents.empty() && w.window == 0) w.window = std::min<std::int64_t>(50, w.seq);
    ASSERT_TRUE(w.check(ranks)) << w.check(ranks).error().message();
    const DocumentShards shards(w, ranks);  // one for every block, as a simulation keeps it
    for (int q = 0; q < ranks; ++q)
      for (int k = 0; k < ranks; ++k) {
        double sum = 0;
        const std::vector<VarlenPiece> fresh = varlen_pieces(w, q, k, ranks);
        const auto kept = shards.pieces(q, k);
        ASSERT_EQ(kept.size(), fresh.size());
        for (std::size_t i = 0; i < fresh.size(); ++i) {
          const VarlenPiece& p = fresh[i];
          EXPECT_GT(p.pairs, 0);
          EXPECT_DOUBLE_EQ(p.pairs, p.count_pairs(w.window));
          EXPECT_TRUE(kept[i].q == p.q && kept[i].k == p.k && kept[i].pairs == p.pairs) << "piece " << i;
          sum += p.pairs;
        }
        EXPECT_DOUBLE_EQ(sum, w.visible_pairs(q, k, ranks))
            << w.mask_text() << " ranks " << ranks << " " << q << "x" << k;
      }
  }
}

// Blocks of one shape price alike: under THD (documents of random lengths, no window) a block's time depends only
// on whether its keys' rank is below, at or above its queries', which is what lets a simulation price three
// blocks a pass instead of ranks^2. With a window, every block is its own shape.
TEST(VarlenTiles, BlocksOfOneShapePriceAlike) {
  const auto m = tiled();
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    const int ranks = 2 + int(rng() % 7);
    ir::Workload w = one_head(1 + int(rng() % 300));
    w.causal = true;
    w.layout = ir::Layout::Zigzag;
    w.seq = 0;
    for (int d = 0, docs = 1 + int(rng() % 30); d < docs; ++d) {
      w.documents.push_back(2 * ranks * (1 + std::int64_t(rng() % 200)));
      w.seq += w.documents.back();
    }
    ASSERT_TRUE(w.check(ranks)) << w.check(ranks).error().message();
    const DocumentShards shards(w, ranks);
    for (const Phase ph : {Phase::Fwd, Phase::Bwd}) {
      std::map<std::int64_t, double> priced;
      for (int q = 0; q < ranks; ++q)
        for (int k = 0; k < ranks; ++k) {
          const auto s = m.varlen_seconds(positions_op(w, q, k, ranks, ph), w, shards);
          ASSERT_TRUE(s.has_value());
          const auto [it, first] = priced.try_emplace(shards.shape(q, k), *s);
          EXPECT_EQ(*s, it->second) << "ranks " << ranks << " block " << q << "x" << k << " " << w.mask_text();
        }
      EXPECT_EQ(priced.size(), 3u);
    }
  }
  ir::Workload window = one_head(1);
  window.causal = true;
  window.layout = ir::Layout::Zigzag;
  window.seq = 4096;
  window.window = 300;
  const DocumentShards own(window, 4);
  EXPECT_NE(own.shape(1, 0), own.shape(2, 1));
}

// FlashAttention's varlen grid runs m equal documents of L tokens as a batch of m causal sequences: a shard of
// them against itself costs what the kernel of one causal L-token block costs at m times the batch.
TEST(VarlenTiles, EqualDocumentsRunAsABatchOfCausalBlocks) {
  const auto m = tiled();
  for (const std::int64_t len : {100, 256, 1000}) {
    ir::Workload w = one_head(2);
    w.documents.assign(16, len);  // 4 ranks, 4 documents a shard
    w.seq = 16 * len;
    w.causal = true;
    ir::Workload batched = w;
    batched.batch = 2 * 4;
    for (const Phase ph : {Phase::Fwd, Phase::Bwd}) {
      const auto s = m.varlen_seconds(positions_op(w, 1, 1, 4, ph), w, DocumentShards(w, 4));
      ASSERT_TRUE(s.has_value());
      const BlockShape triangle{double(len), double(len), true};
      EXPECT_DOUBLE_EQ(*s, m.kernel_seconds(triangle, ph, batched)) << len;
    }
  }
}

// A window as long as the sequence hides nothing: the varlen kernel's block is the causal diagonal's. Once the
// thread blocks fill the SMs, a block of short documents costs far more than the one square block of the same
// pairs that the FLOPs alone give: each document pays a whole tile.
TEST(VarlenTiles, AWholeWindowIsTheCausalBlockAndShortDocumentsPayWholeTiles) {
  const auto m = tiled();
  ir::Workload w = one_head(4);
  w.seq = 4096;
  w.causal = true;
  w.window = 4096;
  for (const Phase ph : {Phase::Fwd, Phase::Bwd}) {
    const ir::Op op = positions_op(w, 0, 0, 4, ph);
    EXPECT_DOUBLE_EQ(*m.varlen_seconds(op, w, DocumentShards(w, 4)),
                     m.compute_seconds(op.flops, ph, w, MaskPiece::Causal));
  }
  ir::Workload docs = one_head(4 * 132);
  docs.documents.assign(256, 16);  // 16-token documents: each pays a 128 x 64 tile for 136 pairs
  docs.seq = 4096;
  docs.causal = true;
  const ir::Op op = positions_op(docs, 0, 0, 4, Phase::Fwd);
  const DocumentShards doc_shards(docs, 4);
  EXPECT_GT(*m.varlen_seconds(op, docs, doc_shards),
            4 * m.compute_seconds(op.flops, Phase::Fwd, docs, MaskPiece::Positions));
  // Not one whole block (half the heads' FLOPs): the square block stands.
  ir::Op half = op;
  half.flops /= 2;
  EXPECT_FALSE(m.varlen_seconds(half, docs, doc_shards).has_value());
  EXPECT_DOUBLE_EQ(m.op_seconds(half, docs, &doc_shards),
                   m.compute_seconds(half.flops, Phase::Fwd, docs, MaskPiece::Positions));
}

}  // namespace
}  // namespace charm::sim
