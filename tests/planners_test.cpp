// Every plan of every algorithm validates.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"

using namespace charm;

namespace {
struct Case {
  std::string algo;
  int ranks, domains;
  ir::PassKind pass;
  bool causal;
  ir::Layout layout;
};
std::string case_name(const ::testing::TestParamInfo<Case>& i) {
  const auto& c = i.param;
  std::string a = c.algo;
  for (auto& ch : a)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = ch == '+' ? 'p' : '_';
  return fmt::format("{}_n{}_d{}_{}_{}_{}", a, c.ranks, c.domains, ir::to_string(c.pass), c.causal ? "causal" : "full",
                     ir::to_string(c.layout));
}
std::vector<Case> grid() {
  std::vector<Case> out;
  for (const auto& algo : sched::algorithm_names())
    for (int n : {2, 3, 4, 6, 8, 12, 16, 24, 32, 64})
      for (int d : {1, 2, 4}) {
        if (n % d != 0 || (d > 1 && algo != "charm" && algo != "usp")) continue;
        const bool pow2 = (n & (n - 1)) == 0;
        // merge, rm+ and charm need power-of-two groups; the others run on any count.
        if (!pow2 && (algo == "merge" || algo == "rm+" || algo == "charm")) continue;
        // Ulysses splits the 4 kv heads of the grid's workload over its group.
        if (algo == "ulysses" && 4 % n != 0) continue;
        if (algo == "usp" && 4 % (n / d) != 0) continue;
        const bool tasp = algo == "tasp" || algo == "tasp-zigzag";
        for (auto pass : {ir::PassKind::Fwd, ir::PassKind::Bwd, ir::PassKind::Both})
          for (bool causal : {false, true})
            for (auto layout : {ir::Layout::Contiguous, ir::Layout::Zigzag}) {
              if ((algo == "ring-zigzag" || algo == "tasp-zigzag") && layout != ir::Layout::Zigzag) continue;
              if (tasp && pass != ir::PassKind::Fwd) continue;  // TASP defines no backward
              out.push_back({algo, n, d, pass, causal, layout});
            }
      }
  return out;
}
}  // namespace

namespace {
/// The grid's request for case c: 8 query heads over 4 kv heads of 64, 24,576 tokens.
sched::PlanRequest grid_request(const Case& c, std::int64_t batch) {
  sched::PlanRequest req{c.algo, {}, c.ranks, c.domains};
  req.workload.batch = batch;
  req.workload.seq = 128 * 3 * 64;
  req.workload.heads = 8;
  req.workload.kv_heads = 4;
  req.workload.head_dim = 64;
  req.workload.causal = c.causal;
  req.workload.layout = c.layout;
  req.workload.pass = c.pass;
  return req;
}
}  // namespace

class EveryPlan : public ::testing::TestWithParam<Case> {};

TEST_P(EveryPlan, Validates) {
  const auto& c = GetParam();
  const sched::PlanRequest req = grid_request(c, 1);
  auto plan = sched::make_plan(req);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const auto rep = sched::validate(*plan);
  EXPECT_TRUE(rep.ok()) << rep.summary(*plan);
  // Every visible pair is computed once per pass (as one op per shard pair where
  // no buffer is cut finer; region plans are held to it by the coverage rule).
  if (plan->has_regions()) return;
  double pairs = 0;
  for (int q = 0; q < c.ranks; ++q)
    for (int k = 0; k < c.ranks; ++k) pairs += req.workload.mask(q, k, c.ranks) != ir::MaskPiece::Empty;
  const double passes = c.pass == ir::PassKind::Both ? 2 : 1;
  EXPECT_EQ(double(rep.computes), pairs * passes);
}

namespace {
/// Every field of every op, dependency list, buffer and result of two plans, FLOP counts bit for bit.
void expect_same_plan(const ir::Plan& a, const ir::Plan& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.buffers().size(), b.buffers().size());
  EXPECT_TRUE(a.workload == b.workload);
  EXPECT_TRUE(a.symmetry == b.symmetry);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const ir::Op &x = a.op(ir::OpId(i)), &y = b.op(ir::OpId(i));
    const auto key = [](const ir::Op& o) {
      return std::tuple(o.rank, o.stream, o.kind, o.phase, o.mask, o.q_owner, o.kv_owner, o.peer, o.tag, o.group,
                        o.buf[0], o.buf[1], o.buf[2], o.buf[3], o.bytes, std::bit_cast<std::uint64_t>(o.flops));
    };
    ASSERT_EQ(key(x), key(y)) << "op " << i;
    const auto dx = a.deps(ir::OpId(i)), dy = b.deps(ir::OpId(i));
    ASSERT_TRUE(std::equal(dx.begin(), dx.end(), dy.begin(), dy.end())) << "deps of op " << i;
  }
  for (std::size_t i = 0; i < a.buffers().size(); ++i) {
    const auto key = [](const ir::Buffer& f) {
      return std::tuple(f.rank, f.kind, f.owner, f.init, f.bytes, f.owners, f.head_begin, f.heads, f.part_begin,
                        f.parts, f.parent, f.reuse);
    };
    ASSERT_EQ(key(a.buffers()[i]), key(b.buffers()[i])) << "buffer " << i;
  }
  for (std::size_t r = 0; r < a.results().size(); ++r) {
    EXPECT_EQ(a.results()[r].out, b.results()[r].out);
    EXPECT_EQ(a.results()[r].dq, b.results()[r].dq);
    EXPECT_EQ(a.results()[r].dkv, b.results()[r].dkv);
  }
}
}  // namespace

// A plan scaled to another power-of-two batch is the plan built for that batch, bit for bit, whole or as
// its symmetry's quotient (what a sweep reuses across batches). Groups up to 16 ranks: the rule is per op.
TEST_P(EveryPlan, ScalesToOtherBatches) {
  const auto& c = GetParam();
  if (c.ranks > 16) return;
  const sched::PlanRequest req = grid_request(c, 3);  // the odd part stays: 3 -> 12 -> 6 -> 48 -> 3
  std::vector<ir::RankSymmetry> quotients{ir::RankSymmetry{}};
  if (const auto sym = sched::plan_symmetry(req); sym.active()) quotients.push_back(sym);
  for (const ir::RankSymmetry& q : quotients) {
    auto plan = sched::make_plan(req, q);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    EXPECT_FALSE(plan->can_scale_batch(5));
    EXPECT_FALSE(plan->can_scale_batch(9));
    for (std::int64_t b : {12, 6, 48, 3}) {
      ASSERT_TRUE(plan->can_scale_batch(b));
      plan->scale_batch(b);
      sched::PlanRequest at = req;
      at.workload.batch = b;
      auto fresh = sched::make_plan(at, q);
      ASSERT_TRUE(fresh.ok()) << fresh.error().message();
      SCOPED_TRACE(fmt::format("batch {}{}", b, q.active() ? " (quotient)" : ""));
      expect_same_plan(*plan, *fresh);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, EveryPlan, ::testing::ValuesIn(grid()), case_name);

TEST(Planners, ScalePositionMasksToOtherBatches) {
  for (const char* algo : {"ring", "charm", "ulysses"}) {
    sched::PlanRequest req{algo, {}, 8, 1};
    req.workload.seq = 8 * 512;
    req.workload.heads = req.workload.kv_heads = 8;
    req.workload.causal = true;
    req.workload.documents = {1000, 3096};
    req.workload.pass = ir::PassKind::Both;
    auto plan = sched::make_plan(req);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    plan->scale_batch(16);
    req.workload.batch = 16;
    auto fresh = sched::make_plan(req);
    ASSERT_TRUE(fresh.ok()) << fresh.error().message();
    SCOPED_TRACE(algo);
    expect_same_plan(*plan, *fresh);
  }
}

// Under packed documents or a window, a whole-shard block carries the workload's own mask piece and FLOPs (the
// builder counts each block's pairs once), and the blocks of every plan sum to the workload's visible FLOPs.
TEST(Planners, PositionMaskedBlocksCarryTheWorkloadsPairs) {
  for (const char* algo : {"ring", "charm", "ulysses", "usp", "tasp"})
    for (const bool window : {false, true}) {
      sched::PlanRequest req{algo, {}, 4, 1};
      req.workload.seq = 4 * 1024;
      req.workload.heads = req.workload.kv_heads = 4;
      req.workload.causal = true;
      if (window)
        req.workload.window = 700;
      else
        req.workload.documents = {1000, 2500, 596};
      req.workload.pass = std::string_view(algo) == "tasp" ? ir::PassKind::Fwd : ir::PassKind::Both;
      const auto plan = sched::make_plan(req);
      ASSERT_TRUE(plan.ok()) << plan.error().message();
      const ir::Workload& w = plan->workload;
      SCOPED_TRACE(fmt::format("{} {}", algo, w.mask_text()));
      std::map<ir::Phase, double> planned, visible;
      for (const ir::Op& op : plan->ops()) {
        if (op.kind != ir::OpKind::Compute) continue;
        planned[op.phase] += op.flops;
        if (op.mask == ir::MaskPiece::Mixed || op.mask == ir::MaskPiece::Empty) continue;
        const ir::Buffer &q = plan->buffer(op.buf[0]), &kv = plan->buffer(op.buf[1]);
        if (q.heads != 0 || q.parts != 0 || kv.heads != 0 || kv.parts != 0) continue;  // a slice of the block
        EXPECT_EQ(op.mask, w.mask(op.q_owner, op.kv_owner, 4));
        EXPECT_EQ(op.flops, w.block_flops(op.phase, op.q_owner, op.kv_owner, 4));
      }
      for (const auto& [phase, flops] : planned) {
        for (int x = 0; x < 4; ++x)
          for (int y = 0; y < 4; ++y) visible[phase] += w.block_flops(phase, x, y, 4);
        EXPECT_NEAR(flops, visible[phase], 1e-9 * visible[phase]) << ir::to_string(phase);
      }
    }
}

TEST(Planners, RefuseWhatTheyCannotPlan) {
  sched::PlanRequest req;
  req.workload.seq = 4096;
  req.algo = "merge";
  req.ranks = 6;
  auto p = sched::make_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().field, Field::Ranks);
  EXPECT_NE(p.error().what.find("power-of-two"), std::string::npos);
  req.algo = "charm";
  req.ranks = 12;
  req.domains = 2;
  p = sched::make_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().field, Field::Domains);
  req.algo = "ring";  // ring runs on any count
  req.ranks = 6;
  req.domains = 1;
  req.workload.seq = 6 * 64;
  p = sched::make_plan(req);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(sched::validate(*p).ok());
  req.workload.layout = ir::Layout::Zigzag;
  req.workload.seq = 6 * 64 + 6;  // divisible by 6 ranks but not into 12 zigzag chunks
  p = sched::make_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().field, Field::Seq);
  req.algo = "bogus";
  p = sched::make_plan(req);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().field, Field::Algo);
}

TEST(Planners, CharmKeepsKvInsideDomains) {
  // The point of CHARM+: only queries, their bundles and their results cross a domain.
  for (auto pass : {ir::PassKind::Fwd, ir::PassKind::Bwd})
    for (int d : {2, 4}) {
      sched::PlanRequest req;
      req.algo = "charm";
      req.ranks = 16;
      req.domains = d;
      req.workload.seq = 4096;
      req.workload.pass = pass;
      auto plan = sched::make_plan(req);
      ASSERT_TRUE(plan.ok());
      const int per = 16 / d;
      int crossing = 0;
      for (const auto& op : plan->ops()) {
        if (op.kind != ir::OpKind::Send) continue;
        const bool cross = op.rank / per != op.peer / per;
        const auto kind = plan->buffer(op.buf[0]).kind;
        if (cross) {
          ++crossing;
          EXPECT_EQ(op.stream, ir::Stream::Cross);
          EXPECT_TRUE(kind == ir::BufKind::Q || kind == ir::BufKind::QBundle || kind == ir::BufKind::Out ||
                      kind == ir::BufKind::Dq)
              << ir::to_string(kind);
          EXPECT_EQ(op.rank % per, op.peer % per);  // corresponding ranks only
        }
      }
      // Each rank sends its queries to d-1 domains and returns d-1 results.
      EXPECT_EQ(crossing, 16 * (d - 1) * 2);
    }
}

TEST(Planners, RmPlusSendsDkvPartialsHomeInTheActivationsDtype) {
  // RM+ (and CHARM+ inside a domain) sends a dK/dV partial home once, as the backward kernel writes it; the
  // ring forwards fp32 running sums. Accumulators and results stay fp32, and plan files keep the width.
  for (const char* algo : {"rm+", "charm", "ring"}) {
    sched::PlanRequest req;
    req.algo = algo;
    req.ranks = 8;
    req.domains = std::string(algo) == "charm" ? 2 : 1;
    req.workload.seq = 1024;
    req.workload.pass = ir::PassKind::Bwd;
    const auto plan = sched::make_plan(req);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    const bool narrow = std::string(algo) != "ring";
    const ir::Workload& w = plan->workload;
    int sends = 0;
    for (const auto& op : plan->ops()) {
      if (op.kind != ir::OpKind::Send || plan->buffer(op.buf[0]).kind != ir::BufKind::Dkv) continue;
      ++sends;
      EXPECT_EQ(plan->buffer(op.buf[0]).activations_dtype, narrow) << algo;
      EXPECT_EQ(op.bytes, w.dkv_bytes(8, narrow)) << algo;
    }
    EXPECT_GT(sends, 0) << algo;
    EXPECT_EQ(w.dkv_bytes(8, true) * 2, w.dkv_bytes(8));  // bf16 against fp32
    for (const auto& r : plan->results()) EXPECT_FALSE(plan->buffer(r.dkv).activations_dtype) << algo;
    const auto back = ir::plan_from_json(ir::plan_to_json(*plan), "round trip");
    ASSERT_TRUE(back.ok()) << back.error().message();
    for (ir::BufferId b = 0; b < ir::BufferId(plan->buffers().size()); ++b)
      EXPECT_EQ(back->buffer(b).activations_dtype, plan->buffer(b).activations_dtype) << algo << " buffer " << b;
    EXPECT_TRUE(sched::validate(*plan).ok()) << algo;
  }
}

TEST(Planners, Rm8RanksFollowsCommList) {
  // Rank 3 of 8 in rm+ forward pulls KV from 2, 1, 6, 7 and exchanges Q with 0, 4, 5.
  sched::PlanRequest req;
  req.algo = "rm+";
  req.ranks = 8;
  req.workload.seq = 1024;
  auto plan = sched::make_plan(req);
  ASSERT_TRUE(plan.ok());
  std::vector<int> kv_from, q_with;
  for (const auto& op : plan->ops()) {
    if (op.rank != 3 || op.kind != ir::OpKind::Recv) continue;
    if (op.stream == ir::Stream::Kv) kv_from.push_back(op.peer);
    if (op.stream == ir::Stream::Q) q_with.push_back(op.peer);
  }
  // Within a level, partners go in order of rank XOR peer (so every round is a
  // perfect matching): level 3 visits 7 (3^4) before 6 (3^5).
  EXPECT_EQ(kv_from, (std::vector<int>{2, 1, 7, 6}));
  EXPECT_EQ(q_with, (std::vector<int>{0, 5, 4}));
}

// docs/algorithms.md's traffic table: messages rank 0 sends, by payload kind.
TEST(Planners, TrafficMatchesTheDocumentedTable) {
  auto sends = [](const std::string& algo, int n, int d, ir::PassKind pass) {
    sched::PlanRequest req;
    req.algo = algo;
    req.ranks = n;
    req.domains = d;
    req.workload.seq = n * 64;
    req.workload.pass = pass;
    auto plan = sched::make_plan(req);
    EXPECT_TRUE(plan.ok());
    std::map<std::string, int> c;
    for (const auto& op : plan->ops())
      if (op.kind == ir::OpKind::Send && op.rank == 0) {
        const bool cross = op.stream == ir::Stream::Cross;
        ++c[std::string(cross ? "x" : "") + std::string(ir::to_string(plan->buffer(op.buf[0]).kind))];
      }
    return c;
  };
  using M = std::map<std::string, int>;
  const auto F = ir::PassKind::Fwd, B = ir::PassKind::Bwd;
  for (int n : {8, 16, 32}) {
    const int R2 = n / 4;  // charm D = 2: R/2
    EXPECT_EQ(sends("ring", n, 1, F), (M{{"kv", n - 1}}));
    EXPECT_EQ(sends("ring", n, 1, B), (M{{"kv", n - 1}, {"dkv", n}}));
    EXPECT_EQ(sends("merge", n, 1, F), (M{{"kv", n - 1}}));
    EXPECT_EQ(sends("merge", n, 1, B), (M{{"kv", n - 1}, {"dkv", n - 1}}));
    EXPECT_EQ(sends("rm+", n, 1, F), (M{{"kv", n / 2}, {"q", n / 2 - 1}, {"out", n / 2 - 1}}));
    EXPECT_EQ(sends("rm+", n, 1, B), (M{{"kv", n / 2}, {"qbundle", n / 2 - 1}, {"dkv", n / 2}, {"dq", n / 2 - 1}}));
    EXPECT_EQ(sends("charm", n, 2, F),
              (M{{"kv", R2}, {"q", 2 * (R2 - 1)}, {"out", 2 * (R2 - 1)}, {"xq", 1}, {"xout", 1}}));
    EXPECT_EQ(
        sends("charm", n, 2, B),
        (M{{"kv", R2}, {"qbundle", 2 * (R2 - 1)}, {"dkv", R2}, {"dq", 2 * (R2 - 1)}, {"xqbundle", 1}, {"xdq", 1}}));
    const int D = 4, R = n / D;
    // One run per domain carries all D query sets: KV moves once, each Q step carries D sets.
    M want{{"kv", R / 2}, {"q", D * (R / 2 - 1)}, {"out", D * (R / 2 - 1)}, {"xq", D - 1}, {"xout", D - 1}};
    std::erase_if(want, [](const auto& kv) { return kv.second == 0; });  // R = 2: no Q stream
    EXPECT_EQ(sends("charm", n, D, F), want);
    EXPECT_EQ(sends("allgather-kv", n, 1, B), (M{{"kv", n - 1}, {"dkv", n - 1}}));
    const int phi = n / 2;  // phi(2^k): the odd steps
    EXPECT_EQ(sends("tasp", n, 1, F), (M{{"kv", (n - 1) * phi}}));
    const int Du = n / 4, Ru = 4;  // usp: 4 ranks per domain share the 8 heads
    EXPECT_EQ(sends("usp", n, Du, F), (M{{"q", Ru - 1}, {"kv", Ru - 1 + Du - 1}, {"out", Ru - 1}}));
    EXPECT_EQ(sends("usp", n, Du, B), (M{{"q", Ru - 1},
                                         {"kv", Ru - 1 + Du - 1},
                                         {"out", Ru - 1},
                                         {"dout", Ru - 1},
                                         {"dq", Ru - 1},
                                         {"dkv", Ru - 1 + Du}}));
  }
  // Ulysses over 8 ranks (the default workload's 8 heads): one all-to-all per tensor.
  EXPECT_EQ(sends("ulysses", 8, 1, F), (M{{"q", 7}, {"kv", 7}, {"out", 7}}));
  EXPECT_EQ(sends("ulysses", 8, 1, B), (M{{"q", 7}, {"kv", 7}, {"out", 7}, {"dout", 7}, {"dq", 7}, {"dkv", 7}}));
  EXPECT_EQ(sends("ulysses", 8, 1, ir::PassKind::Both),
            (M{{"q", 7}, {"kv", 7}, {"out", 7}, {"dout", 7}, {"dq", 7}, {"dkv", 7}}));
}
