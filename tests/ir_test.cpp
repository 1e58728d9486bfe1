#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <sstream>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/ir/suggest.hpp"
#include "scheduler/planners/planners.hpp"

using namespace charm;
using namespace charm::ir;

namespace {
Plan small_plan(const std::string& algo, PassKind pass = PassKind::Both, int kv_heads = 2) {
  sched::PlanRequest req;
  req.algo = algo;
  req.ranks = 4;
  req.domains = 2;
  req.workload.seq = 64;
  req.workload.heads = 4;
  req.workload.kv_heads = kv_heads;
  req.workload.head_dim = 16;
  req.workload.causal = true;
  req.workload.pass = pass;
  auto p = sched::make_plan(req);
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message());
  return std::move(p).value();
}
} // namespace

TEST(Workload, BytesFollowFromShape) {
  Workload w;
  w.batch = 2; w.seq = 1024; w.heads = 8; w.kv_heads = 2; w.head_dim = 64; w.dtype = DType::BF16;
  // Per shard of 4 ranks: 256 tokens. Q: 2*256*8*64*2 bytes; KV: 2 tensors with 2 heads.
  EXPECT_EQ(w.q_bytes(4), 2u * 256 * 8 * 64 * 2);
  EXPECT_EQ(w.kv_bytes(4), 2u * 2 * 256 * 2 * 64 * 2);
  EXPECT_LT(w.kv_bytes(4), w.q_bytes(4));  // GQA makes KV smaller than Q here
  w.kv_heads = 8;
  EXPECT_EQ(w.kv_bytes(4), 2 * w.q_bytes(4));
  EXPECT_EQ(w.out_bytes(4), w.q_bytes(4) + 2u * 8 * 256 * 4);       // + fp32 LSE
  EXPECT_EQ(w.dq_bytes(4), 2u * 256 * 8 * 64 * 4);                  // fp32
  w.dtype = DType::FP32;
  EXPECT_EQ(w.q_bytes(4), 2u * 256 * 8 * 64 * 4);
}

TEST(Workload, MasksAndVisiblePairs) {
  Workload w;
  w.seq = 16; w.causal = true;
  // Contiguous, 2 ranks of 8 tokens: the diagonal holds 8*9/2 = 36 pairs.
  EXPECT_EQ(w.mask(1, 0, 2), MaskPiece::Full);
  EXPECT_EQ(w.mask(0, 1, 2), MaskPiece::Empty);
  EXPECT_EQ(w.mask(1, 1, 2), MaskPiece::Causal);
  EXPECT_DOUBLE_EQ(w.visible_pairs(1, 1, 2), 36);
  EXPECT_DOUBLE_EQ(w.visible_pairs(1, 0, 2), 64);
  // Zigzag, 2 ranks: chunks of 4; rank 0 = {0, 3}, rank 1 = {1, 2}.
  w.layout = Layout::Zigzag;
  EXPECT_EQ(w.mask(0, 0, 2), MaskPiece::ZigzagDiag);
  EXPECT_EQ(w.mask(1, 0, 2), MaskPiece::ZigzagKvHead);
  EXPECT_EQ(w.mask(0, 1, 2), MaskPiece::ZigzagQTail);
  // Rank 0 vs itself: chunk0 diag 10 + chunk3 x chunk0 16 + chunk3 diag 10 = 36.
  EXPECT_DOUBLE_EQ(w.visible_pairs(0, 0, 2), 36);
  // Rank 0 queries vs rank 1 keys: chunk3 sees chunks 1 and 2 fully: 32.
  EXPECT_DOUBLE_EQ(w.visible_pairs(0, 1, 2), 32);
  // Total over all pairs = S(S+1)/2 = 136.
  double total = 0;
  for (int q = 0; q < 2; ++q) for (int k = 0; k < 2; ++k) total += w.visible_pairs(q, k, 2);
  EXPECT_DOUBLE_EQ(total, 136);
}

TEST(Workload, CheckNamesTheFlag) {
  Workload w;
  w.seq = 1000; w.layout = Layout::Zigzag;
  auto s = w.check(8);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().where, "--seq");
  w.seq = 1024; w.heads = 6; w.kv_heads = 4;
  s = w.check(8);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().where, "--kv-heads");
}

TEST(PlanIo, JsonRoundTrip) {
  for (const auto& algo : sched::algorithm_names()) {
    if (algo == "ring-zigzag") continue;
    // TASP is forward only; Ulysses splits the kv heads over all 4 ranks.
    Plan p = small_plan(algo, algo.starts_with("tasp") ? PassKind::Fwd : PassKind::Both, algo == "ulysses" ? 4 : 2);
    const auto j1 = plan_to_json(p);
    auto back = plan_from_json(j1, "plan");
    ASSERT_TRUE(back.ok()) << back.error().message();
    EXPECT_EQ(plan_to_json(*back), j1) << algo;
    EXPECT_EQ(back->size(), p.size());
  }
}

TEST(PlanIo, JsonHasTheDocumentedShape) {
  const auto j = plan_to_json(small_plan("charm"));
  EXPECT_EQ(j["schema"], 1);
  EXPECT_EQ(j["algo"], "charm");
  EXPECT_EQ(j["ranks"], 4);
  bool saw_send = false, saw_compute = false;
  for (const auto& op : j["ops"]) {
    ASSERT_TRUE(op.contains("id") && op.contains("rank") && op.contains("stream") && op.contains("kind") && op.contains("deps"));
    if (op["kind"] == "send") {
      saw_send = true;
      EXPECT_TRUE(op.contains("peer") && op.contains("tag") && op.contains("bytes"));
    }
    if (op["kind"] == "compute") {
      saw_compute = true;
      EXPECT_TRUE(op.contains("q_block") && op.contains("kv_block") && op.contains("mask"));
    }
  }
  EXPECT_TRUE(saw_send && saw_compute);
}

TEST(PlanIo, ErrorsNameTheJsonPath) {
  auto j = plan_to_json(small_plan("ring"));
  j["ops"][3]["peer"] = "two";
  auto r = plan_from_json(j, "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "p.json.ops[3].peer: must be an integer");
  j = plan_to_json(small_plan("ring"));
  j["ops"][0].erase("kind");
  r = plan_from_json(j, "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().where, "p.json.ops[0].kind");
  j = plan_to_json(small_plan("ring"));
  j["ops"][5]["deps"] = {100000};
  r = plan_from_json(j, "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().where, "p.json.ops[5].deps[0]");
  j = plan_to_json(small_plan("ring"));
  j["workload"]["dtype"] = "fp8";
  r = plan_from_json(j, "p.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().where, "p.json.workload.dtype");
}

TEST(PlanIo, DotAndListing) {
  Plan p = small_plan("rm+", PassKind::Fwd);
  std::ostringstream dot, lst;
  write_dot(p, dot);
  write_listing(p, lst);
  EXPECT_NE(dot.str().find("digraph plan"), std::string::npos);
  EXPECT_NE(dot.str().find("cluster_rank3"), std::string::npos);
  EXPECT_NE(dot.str().find("style=dashed"), std::string::npos);  // a message edge
  EXPECT_NE(lst.str().find("rank 0:"), std::string::npos);
  EXPECT_NE(lst.str().find("fwd Q0*KV0 causal"), std::string::npos);
}

TEST(Plan, OpsAreCompact) {
  EXPECT_LE(sizeof(Op), 72u);
  Plan p = small_plan("charm");
  EXPECT_LT(p.memory_bytes() / p.size(), 200u);
}

TEST(Suggest, NearestNameForATypo) {
  const std::vector<std::string> names{"ring", "ring-zigzag", "merge", "rm+", "charm", "ulysses", "usp"};
  EXPECT_EQ(charm::edit_distance("chram", "charm"), 1u);  // one swap
  EXPECT_EQ(charm::edit_distance("CHARM", "charm"), 0u);
  EXPECT_EQ(charm::edit_distance("ulyses", "ulysses"), 1u);
  EXPECT_EQ(charm::closest_name("chram", names), "charm");
  EXPECT_EQ(charm::closest_name("ulyses", names), "ulysses");
  EXPECT_EQ(charm::closest_name("ringzigzag", names), "ring-zigzag");
  EXPECT_FALSE(charm::closest_name("bogus", names).has_value());  // far from everything: no guess
  EXPECT_FALSE(charm::closest_name("x", names).has_value());
}
