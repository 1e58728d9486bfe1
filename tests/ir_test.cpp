#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <sstream>
#include <variant>

#include "scheduler/ir/op_args.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/ir/plan_io.hpp"
#include "scheduler/ir/shard_documents.hpp"
#include "scheduler/planners/planners.hpp"
#include "support/json_text.hpp"
#include "support/suggest.hpp"

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
}  // namespace

TEST(Workload, BytesFollowFromShape) {
  Workload w;
  w.batch = 2;
  w.seq = 1024;
  w.heads = 8;
  w.kv_heads = 2;
  w.head_dim = 64;
  w.dtype = DType::BF16;
  // Per shard of 4 ranks: 256 tokens. Q: 2*256*8*64*2 bytes; KV: 2 tensors with 2 heads.
  EXPECT_EQ(w.q_bytes(4), 2u * 256 * 8 * 64 * 2);
  EXPECT_EQ(w.kv_bytes(4), 2u * 2 * 256 * 2 * 64 * 2);
  EXPECT_LT(w.kv_bytes(4), w.q_bytes(4));  // GQA makes KV smaller than Q here
  w.kv_heads = 8;
  EXPECT_EQ(w.kv_bytes(4), 2 * w.q_bytes(4));
  EXPECT_EQ(w.out_bytes(4), w.q_bytes(4) + 2u * 8 * 256 * 4);  // + fp32 LSE
  EXPECT_EQ(w.dq_bytes(4), 2u * 256 * 8 * 64 * 4);             // fp32
  w.dtype = DType::FP32;
  EXPECT_EQ(w.q_bytes(4), 2u * 256 * 8 * 64 * 4);
}

TEST(Workload, MasksAndVisiblePairs) {
  Workload w;
  w.seq = 16;
  w.causal = true;
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
  for (int q = 0; q < 2; ++q)
    for (int k = 0; k < 2; ++k) total += w.visible_pairs(q, k, 2);
  EXPECT_DOUBLE_EQ(total, 136);
}

// band_pairs counts what a query-by-query loop counts, for query and key ranges that straddle, nest or miss each
// other, with and without a window; and the shards cut by document count every block's pairs as the workload does.
TEST(Workload, BandPairsAndShardDocumentsCountWhatALoopCounts) {
  for (std::int64_t qa = 0; qa < 12; ++qa)
    for (std::int64_t qb = qa; qb < 14; qb += 3)
      for (std::int64_t ka = 0; ka < 12; ka += 2)
        for (std::int64_t kb = ka; kb < 14; kb += 3)
          for (const std::int64_t window : {0, 1, 3, 7}) {
            double loop = 0;
            for (std::int64_t p = qa; p < qb; ++p)
              for (std::int64_t k = ka; k < kb; ++k) loop += k <= p && (window == 0 || k > p - window);
            ASSERT_EQ(ir::band_pairs(qa, qb, ka, kb, window), loop)
                << qa << " " << qb << " " << ka << " " << kb << " w" << window;
          }
  ir::Workload w;
  w.seq = 4096;
  w.causal = true;
  w.layout = ir::Layout::Balanced;
  w.documents = {700, 1300, 96, 2000};
  for (int r = 0; r < 4; ++r) w.chunk_map.push_back({});
  for (std::int64_t c = 0; c < 32; ++c) w.chunk_map[std::size_t((c * 7) % 4)].push_back({c * 128, 128});
  ASSERT_TRUE(w.check(4)) << w.check(4).error().message();
  for (const std::int64_t window : {0, 200}) {
    w.window = window;
    const ir::ShardDocuments docs(w, 4);
    EXPECT_FALSE(docs.thd_cut());
    for (int q = 0; q < 4; ++q)
      for (int k = 0; k < 4; ++k) EXPECT_EQ(docs.pairs(q, k), w.visible_pairs(q, k, 4)) << q << "x" << k;
  }
  // A balanced chunk map that is THD's cut (the chunk solver's THD candidate) counts in THD's closed form.
  w.window = 0;
  w.documents = {800, 1600, 96 * 8, 928};
  ir::Workload zigzag = w;
  zigzag.layout = ir::Layout::Zigzag;
  zigzag.chunk_map.clear();
  ASSERT_TRUE(zigzag.check(4)) << zigzag.check(4).error().message();
  for (int r = 0; r < 4; ++r) w.chunk_map[std::size_t(r)] = zigzag.shard_ranges(r, 4);
  ASSERT_TRUE(w.check(4)) << w.check(4).error().message();
  const ir::ShardDocuments thd(w, 4);
  EXPECT_TRUE(thd.thd_cut());
  EXPECT_TRUE(ir::ShardDocuments(zigzag, 4).thd_cut());
  for (int q = 0; q < 4; ++q)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(thd.pairs(q, k), w.visible_pairs(q, k, 4)) << q << "x" << k;
}

TEST(Workload, CheckNamesTheFlag) {
  Workload w;
  w.seq = 1000;
  w.layout = Layout::Zigzag;
  auto s = w.check(8);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().field, Field::Seq);
  w.seq = 1024;
  w.heads = 6;
  w.kv_heads = 4;
  s = w.check(8);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().field, Field::KvHeads);
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
    ASSERT_TRUE(op.contains("id") && op.contains("rank") && op.contains("stream") && op.contains("kind") &&
                op.contains("deps"));
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

TEST(Plan, EraseOpsRenumbersAndKeepsEverythingElse) {
  Plan p = small_plan("ring");
  p.groups = 2;  // as a deployment would set them (the ops need not match: only the fields are checked)
  p.gpus = {3, 2, 1, 0};
  const Plan before = p;
  // Erase op 1: every op after it moves down by one, deps on it are dropped, deps past it renumbered.
  p.erase_ops(std::vector<OpId>{1});
  ASSERT_EQ(p.size(), before.size() - 1);
  EXPECT_EQ(p.groups, 2);
  EXPECT_EQ(p.gpus, before.gpus);
  EXPECT_EQ(p.algo, before.algo);
  EXPECT_EQ(p.buffers().size(), before.buffers().size());
  for (std::size_t i = 2; i < before.size(); ++i) {
    const auto id = static_cast<OpId>(i);
    EXPECT_EQ(p.op(id - 1).kind, before.op(id).kind) << i;
    std::vector<OpId> want;
    for (OpId d : before.deps(id))
      if (d != 1) want.push_back(d > 1 ? d - 1 : d);
    const auto got = p.deps(id - 1);
    EXPECT_EQ(std::vector<OpId>(got.begin(), got.end()), want) << i;
  }
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

TEST(PlanIndex, LanesGroupsPartnersAndDependents) {
  const Plan p = small_plan("charm");
  const PlanIndex idx(p);
  std::size_t seen = 0;
  for (std::size_t l = 0; l < idx.lanes(); ++l) {
    OpId prev = kNone;
    for (OpId id : idx.lane_ops(l)) {
      EXPECT_EQ(idx.lane_of(id), l);
      EXPECT_EQ(idx.at(idx.pos(id)), id);
      EXPECT_GT(id, prev);  // stream order is id order
      prev = id;
      ++seen;
      // A group is consecutive comm ops of one group id (or one op alone), and contains the op.
      const auto g = idx.group(id);
      EXPECT_NE(std::find(g.begin(), g.end(), id), g.end());
      for (OpId m : g) {
        EXPECT_EQ(idx.lane_of(m), l);
        if (g.size() > 1) {
          EXPECT_TRUE(is_comm(p.op(m)) && p.op(m).group == p.op(id).group);
        }
      }
    }
  }
  EXPECT_EQ(seen, p.size());
  std::size_t deps = 0;
  for (OpId id = 0; id < OpId(p.size()); ++id) {
    const Op& o = p.op(id);
    if (is_comm(o)) {
      const OpId m = idx.partner(id);
      ASSERT_NE(m, kNone) << op_label(p, id);
      EXPECT_EQ(idx.partner(m), id);
      EXPECT_EQ(p.op(m).rank, o.peer);
      EXPECT_EQ(p.op(m).tag, o.tag);
      EXPECT_EQ(p.op(m).stream, o.stream);
      EXPECT_NE(p.op(m).kind, o.kind);
    } else {
      EXPECT_EQ(idx.partner(id), kNone);
    }
    for (OpId d : p.deps(id)) {
      const auto rd = idx.dependents(d);
      EXPECT_NE(std::find(rd.begin(), rd.end(), id), rd.end());
      ++deps;
    }
  }
  std::size_t rdeps = 0;
  for (OpId id = 0; id < OpId(p.size()); ++id) rdeps += idx.dependents(id).size();
  EXPECT_EQ(rdeps, deps);
}

// sort_messages against a plain sort of the same messages by (stream, src, dst, tag, id): planners' plans (tags
// in id order), and sends and receives with random peers and tags in any order (a plan no planner makes).
TEST(PlanIndex, MessagesSortByStreamSourceDestinationTagAndId) {
  auto check = [](const Plan& p, const std::string& what) {
    const MessageOrder m = sort_messages(p);
    for (const auto* list : {&m.sends, &m.recvs}) {
      std::vector<Message> want = *list;
      std::sort(want.begin(), want.end(), [](const Message& a, const Message& b) {
        return std::tie(a.stream, a.src, a.dst, a.tag, a.id) < std::tie(b.stream, b.src, b.dst, b.tag, b.id);
      });
      ASSERT_EQ(list->size(), want.size()) << what;
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(std::tie((*list)[i].stream, (*list)[i].src, (*list)[i].dst, (*list)[i].tag, (*list)[i].id),
                  std::tie(want[i].stream, want[i].src, want[i].dst, want[i].tag, want[i].id))
            << what << " at " << i;
    }
  };
  for (const char* algo : {"charm", "ring", "usp", "ulysses"}) check(small_plan(algo, PassKind::Both, 4), algo);
  Plan p;
  p.ranks = 5;
  std::uint32_t x = 12345;
  auto next = [&](std::uint32_t n) {
    x = x * 1664525u + 1013904223u;
    return (x >> 8) % n;
  };
  for (int i = 0; i < 400; ++i) {
    Op o;
    o.kind = next(2) == 0 ? OpKind::Send : OpKind::Recv;
    o.stream = Stream(1 + next(kNumStreams - 1));
    o.rank = RankId(next(5));
    o.peer = RankId((o.rank + 1 + RankId(next(4))) % 5);
    o.tag = std::int32_t(next(6));
    (void)p.add_op(o, {});
  }
  check(p, "random messages");
}

TEST(PlanIndex, ALeanIndexHoldsTheSameLanesPartnersAndDependents) {
  for (const char* algo : {"charm", "ring", "usp"}) {
    const Plan p = small_plan(algo, PassKind::Both);
    const PlanIndex full(p), lean(p, nullptr, PlanIndex::Parts::Lean);
    EXPECT_FALSE(full.lean());
    EXPECT_TRUE(lean.lean());
    ASSERT_EQ(lean.lanes(), full.lanes());
    for (std::size_t l = 0; l <= lean.lanes(); ++l)
      EXPECT_EQ(l < lean.lanes() ? lean.lane_begin(l) : lean.lane_end(l - 1),
                l < full.lanes() ? full.lane_begin(l) : full.lane_end(l - 1));
    EXPECT_TRUE(std::equal(lean.stream_order().begin(), lean.stream_order().end(), full.stream_order().begin(),
                           full.stream_order().end()));
    for (OpId id = 0; id < OpId(p.size()); ++id) {
      EXPECT_EQ(PlanIndex::lane(p.op(id)), full.lane_of(id));
      EXPECT_EQ(lean.partner(id), full.partner(id));
      const auto a = lean.dependents(id), b = full.dependents(id);
      EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin(), b.end())) << algo << " op " << id;
      // The group rule the lean index leaves to its users, against the full index's groups.
      const auto lane = full.lane_ops(full.lane_of(id));
      const auto at = std::size_t(std::find(lane.begin(), lane.end(), id) - lane.begin());
      const bool joins = at > 0 && PlanIndex::joins_group(p.op(lane[at - 1]), p.op(id));
      EXPECT_EQ(joins, full.group_begin(id) != full.pos(id)) << algo << " op " << id;
    }
    EXPECT_LT(lean.memory_bytes() + 12 * p.size(), full.memory_bytes() + 1);
  }
}

TEST(OpArgs, DecodeNamesSlotsAndRefusesBadOnes) {
  Plan p = small_plan("ring", PassKind::Both);
  std::size_t kinds[std::variant_size_v<OpArgs>] = {};
  for (OpId id = 0; id < OpId(p.size()); ++id) {
    auto a = decode(p, id);
    ASSERT_TRUE(a.ok()) << op_label(p, id) << ": " << a.error().what;
    ++kinds[a->index()];
    EXPECT_EQ(a->index(), args(p.op(id)).index());
  }
  for (const OpArgs& k :
       {OpArgs(ComputeFwdArgs{}), OpArgs(ComputeBwdArgs{}), OpArgs(SendArgs{}), OpArgs(RecvArgs{}), OpArgs(PackArgs{})})
    EXPECT_GT(kinds[k.index()], 0u) << "kind " << k.index();
  // A forward compute: q, kv, out in slots 0..2.
  OpId c = 0;
  while (p.op(c).kind != OpKind::Compute || p.op(c).phase != Phase::Fwd) ++c;
  const auto f = std::get<ComputeFwdArgs>(*decode(p, c));
  EXPECT_EQ(p.buffer(f.q).kind, BufKind::Q);
  EXPECT_EQ(p.buffer(f.kv).kind, BufKind::Kv);
  EXPECT_EQ(p.buffer(f.out).kind, BufKind::Out);
  Op& o = p.op(c);
  std::swap(o.buf[0], o.buf[1]);
  auto bad = decode(p, c);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().what, "buffer slot 0 holds kv, expected q");
  o.buf[0] = kNone;
  EXPECT_EQ(decode(p, c).error().what, "buffer slot 0 is empty");
  o.buf[0] = BufferId(p.buffers().size());
  EXPECT_NE(decode(p, c).error().what.find("which does not exist"), std::string::npos);
  // A buffer of another rank.
  BufferId other = 0;
  while (p.buffer(other).rank == o.rank || p.buffer(other).kind != BufKind::Q) ++other;
  o.buf[0] = other;
  EXPECT_NE(decode(p, c).error().what.find("rank-local"), std::string::npos) << decode(p, c).error().what;
}

TEST(JsonText, NestingIsBoundedBeforeTheParseGoesDeep) {
  const auto nested = [](std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(bool(parse_json_strict(nested(256), "f.json")));
  const auto deep = parse_json_strict(nested(257), "f.json");
  ASSERT_FALSE(bool(deep));
  EXPECT_EQ(deep.error().message(),
            "f.json: malformed JSON: arrays and objects nested more than 256 deep (at the top level)");
  // 30 MB of '[' stops at the 257th: at once, not after gigabytes of nesting.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(bool(parse_json_strict(std::string(30u << 20, '['), "f.json")));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  const auto in_object = parse_json_strict("{\"a\": {\"b\": " + nested(300) + "}}", "f.json");
  ASSERT_FALSE(bool(in_object));
  EXPECT_NE(in_object.error().what.find("(at a.b)"), std::string::npos) << in_object.error().what;
}

TEST(JsonText, ManyKeysAreCheckedInLinearithmicTime) {
  std::string text = "{";
  for (int i = 0; i < 400000; ++i) text += (i > 0 ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  const auto t0 = std::chrono::steady_clock::now();
  const auto j = parse_json_strict(text + "}", "f.json");
  ASSERT_TRUE(bool(j)) << j.error().message();
  EXPECT_EQ(j->size(), 400000u);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);  // was over 60 s
  // A repeat is found among many keys as among a few, and the object after a large one starts afresh.
  const auto dup = parse_json_strict(text + ",\"k123\":2}", "f.json");
  ASSERT_FALSE(bool(dup));
  EXPECT_NE(dup.error().what.find("duplicate key 'k123' in the top level"), std::string::npos) << dup.error().what;
  std::string two = "[{";
  for (int i = 0; i < 100; ++i) two += (i > 0 ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  EXPECT_TRUE(bool(parse_json_strict(two + "}, {\"k1\": 1, \"k2\": 2}]", "f.json")));
  EXPECT_FALSE(bool(parse_json_strict(two + "}, {\"k1\": 1, \"k1\": 2}]", "f.json")));
}
