// Region buffers on the CPU executor (scheduler/ir/region.hpp): the region
// copy against an element-by-element oracle, and rule violations that end the
// run with an error naming the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "runtime/executor.hpp"
#include "runtime/region_copy.hpp"
#include "runtime/stall.hpp"
#include "runtime_region_test_support.hpp"
#include "scheduler/ir/buffer_rules.hpp"
#include "scheduler/ir/op_args.hpp"
#include "scheduler/planners/plan_builder.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"

namespace charm::rt {
namespace {

using ir::BufferId;
using ir::BufInit;
using ir::BufKind;
using ir::Region;
using ir::Stream;
using test_support::workload_of;

// ---------------------------------------------------------------------------
// The region copy.

constexpr BufKind kKinds[] = {BufKind::Q,       BufKind::Kv, BufKind::Out, BufKind::Dout,
                              BufKind::QBundle, BufKind::Dq, BufKind::Dkv};

ir::Workload copy_workload() {
  ir::Workload w;
  w.batch = 2;
  w.seq = 4 * 4 * 3;  // 4 ranks, 4 parts of 3 tokens
  w.heads = 8;
  w.kv_heads = 4;
  w.head_dim = 3;
  return w;
}
constexpr int kRanks = 4, kParts = 4;

std::int64_t storage(const ir::Workload& w, BufKind k, const Region& r) {
  return ShardShape::of_region(w, kRanks, kParts, r).elems(k) * r.owners();
}

// One tensor of a buffer kind, as the layout comment of shard_shape.hpp lists them.
struct Comp {
  bool rows;
  std::int64_t group;
};
std::vector<Comp> comps(const ir::Workload& w, BufKind k) {
  const std::int64_t g = w.heads / w.kv_heads;
  switch (k) {
  case BufKind::Q:
  case BufKind::Dout:
  case BufKind::Dq:
    return {{false, g}};
  case BufKind::Kv:
  case BufKind::Dkv:
    return {{false, 1}, {false, 1}};
  case BufKind::Out:
    return {{false, g}, {true, g}};
  case BufKind::QBundle:
    return {{false, g}, {false, g}, {true, g}, {true, g}};
  }
  return {};
}

// Element (owner x, component c, batch b, shard-local token t, global head h, d) of a
// buffer over region r: its index in the buffer's storage, or -1 when r does not hold it.
std::int64_t index_of(const ir::Workload& w, BufKind k, const Region& r, int x, int c, std::int64_t b, std::int64_t t,
                      std::int64_t h, std::int64_t d) {
  const std::int64_t tp = w.seq / kRanks / kParts, D = w.head_dim;
  const auto cs = comps(w, k);
  const std::int64_t grp = cs[std::size_t(c)].group;
  if (x < r.owner_begin || x >= r.owner_end || t < tp * r.part_begin || t >= tp * r.part_end ||
      h < grp * r.head_begin || h >= grp * r.head_end)
    return -1;
  const std::int64_t T = tp * r.parts(), H = grp * r.heads(), B = w.batch;
  std::int64_t off = ShardShape::of_region(w, kRanks, kParts, r).elems(k) * (x - r.owner_begin);
  for (int i = 0; i < c; ++i) off += cs[std::size_t(i)].rows ? B * H * T : B * T * H * D;
  const std::int64_t tl = t - tp * r.part_begin, hl = h - grp * r.head_begin;
  return cs[std::size_t(c)].rows ? off + (b * H + hl) * T + tl : off + ((b * T + tl) * H + hl) * D + d;
}

// Every element of the workload's shards: calls f(x, c, b, t, h, d).
template <class F>
void for_each_element(const ir::Workload& w, BufKind k, F&& f) {
  const std::int64_t T = w.seq / kRanks;
  const auto cs = comps(w, k);
  for (int x = 0; x < kRanks; ++x)
    for (int c = 0; c < int(cs.size()); ++c) {
      const std::int64_t H = cs[std::size_t(c)].group * w.kv_heads;
      for (std::int64_t b = 0; b < w.batch; ++b)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t h = 0; h < H; ++h)
            for (std::int64_t d = 0; d < (cs[std::size_t(c)].rows ? 1 : w.head_dim); ++d) f(x, c, b, t, h, d);
    }
}

std::vector<float> iota_storage(const ir::Workload& w, BufKind k, const Region& r, float base) {
  std::vector<float> v(std::size_t(storage(w, k, r)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = base + float(i);
  return v;
}

// The oracle: after copy_region(src over rs -> dst over rd), every element of rd that
// rs holds carries src's value; every other element of dst is untouched.
void expect_copy_matches_oracle(const ir::Workload& w, BufKind k, const Region& rs, const Region& rd) {
  const auto src = iota_storage(w, k, rs, 1.0f);
  std::vector<float> dst(std::size_t(storage(w, k, rd)), -7.0f);
  ASSERT_TRUE(copy_region(w, kRanks, kParts, k, rs, src, rd, dst).ok());
  std::int64_t copied = 0, total = 0;
  for_each_element(w, k, [&](int x, int c, std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t d) {
    const std::int64_t id = index_of(w, k, rd, x, c, b, t, h, d);
    if (id < 0) return;
    ++total;
    const std::int64_t is = index_of(w, k, rs, x, c, b, t, h, d);
    const float want = is < 0 ? -7.0f : src[std::size_t(is)];
    copied += is >= 0;
    ASSERT_EQ(dst[std::size_t(id)], want)
        << ir::to_string(k) << " x" << x << " c" << c << " b" << b << " t" << t << " h" << h << " d" << d;
  });
  EXPECT_EQ(total, std::int64_t(dst.size()));  // the oracle visits every element of dst once
  (void)copied;
}

Region shard(int x) { return {x, x + 1, 0, 4, 0, kParts}; }

TEST(RegionCopy, ShardShapeOfRegionIsTheWholeShardForOneOwner) {
  const auto w = copy_workload();
  const auto whole = ShardShape::of(w, kRanks), r = ShardShape::of_region(w, kRanks, kParts, shard(2));
  for (BufKind k : kKinds) EXPECT_EQ(whole.elems(k), r.elems(k)) << ir::to_string(k);
  const auto s = ShardShape::of_region(w, kRanks, kParts, Region{0, 3, 1, 3, 1, 2});
  EXPECT_EQ(s.tokens, 3);
  EXPECT_EQ(s.kv_heads, 2);
  EXPECT_EQ(s.heads, 4);
}

/// Cuts a whole shard into `slices` and places each back into a zeroed shard: every kind comes back intact.
static void expect_slicing_round_trips(std::int32_t owner, float base, std::initializer_list<Region> slices) {
  const auto w = copy_workload();
  for (BufKind k : kKinds) {
    const auto src = iota_storage(w, k, shard(owner), base);
    std::vector<float> back(src.size(), 0.0f);
    for (const Region& slice : slices) {
      std::vector<float> mid(std::size_t(storage(w, k, slice)), -1.0f);
      ASSERT_TRUE(copy_region(w, kRanks, kParts, k, shard(owner), src, slice, mid).ok());
      ASSERT_TRUE(copy_region(w, kRanks, kParts, k, slice, mid, shard(owner), back).ok());
    }
    EXPECT_EQ(back, src) << ir::to_string(k);
  }
}

TEST(RegionCopy, SlicingHeadsAndPlacingThemBackIsTheIdentity) {
  expect_slicing_round_trips(
      1, 0.5f, {Region{1, 2, 0, 1, 0, kParts}, Region{1, 2, 1, 3, 0, kParts}, Region{1, 2, 3, 4, 0, kParts}});
}

TEST(RegionCopy, SlicingPartsAndPlacingThemBackIsTheIdentity) {
  expect_slicing_round_trips(3, 0.0f, {Region{3, 4, 0, 4, 0, 1}, Region{3, 4, 0, 4, 1, 3}, Region{3, 4, 0, 4, 3, 4}});
}

TEST(RegionCopy, OwnersOfAGatheredBufferAreContiguousBlocks) {
  const auto w = copy_workload();
  for (BufKind k : kKinds) {
    const Region all{0, 4, 1, 2, 0, kParts};
    const auto src = iota_storage(w, k, all, 0.0f);
    const Region one{2, 3, 1, 2, 0, kParts};
    std::vector<float> mid(std::size_t(storage(w, k, one)));
    ASSERT_TRUE(copy_region(w, kRanks, kParts, k, all, src, one, mid).ok());
    const std::int64_t block = storage(w, k, one);
    for (std::size_t i = 0; i < mid.size(); ++i) ASSERT_EQ(mid[i], src[std::size_t(2 * block) + i]) << ir::to_string(k);
  }
}

TEST(RegionCopy, LseRowsMoveAsTokenRunsPerHead) {
  const auto w = copy_workload();                      // g = 2, tp = 3
  const Region from = shard(0), to{0, 1, 2, 3, 1, 3};  // kv head 2 = query heads 4, 5; tokens 3..8
  const auto src = iota_storage(w, BufKind::Out, from, 0.0f);
  std::vector<float> dst(std::size_t(storage(w, BufKind::Out, to)));
  ASSERT_TRUE(copy_region(w, kRanks, kParts, BufKind::Out, from, src, to, dst).ok());
  const std::int64_t T = 12, H = 8, D = 3, nq = 2 * T * H * D;  // the whole shard's O, then LSE [B, H, T]
  const std::int64_t t2 = 6, h2 = 2, nq2 = 2 * t2 * h2 * D;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < h2; ++h)
      for (std::int64_t t = 0; t < t2; ++t) {
        EXPECT_EQ(dst[std::size_t(nq2 + (b * h2 + h) * t2 + t)], src[std::size_t(nq + (b * H + 4 + h) * T + 3 + t)]);
        for (std::int64_t d = 0; d < D; ++d)
          EXPECT_EQ(dst[std::size_t(((b * t2 + t) * h2 + h) * D + d)],
                    src[std::size_t(((b * T + 3 + t) * H + 4 + h) * D + d)]);
      }
}

TEST(RegionCopy, MatchesTheElementOracleOnRandomRegions) {
  const auto w = copy_workload();
  std::mt19937 rng(11);
  auto range = [&](int n) {
    std::uniform_int_distribution<int> a(0, n - 1);
    const int x = a(rng);
    std::uniform_int_distribution<int> len(1, n - x);
    return std::pair{x, x + len(rng)};
  };
  auto random_region = [&] {
    auto [o0, o1] = range(kRanks);
    auto [h0, h1] = range(4);
    auto [p0, p1] = range(kParts);
    return Region{o0, o1, h0, h1, p0, p1};
  };
  for (int i = 0; i < 60; ++i) {
    const BufKind k = kKinds[i % 7];
    Region a = random_region(), b = random_region();
    if (i % 2 == 0) b = a.intersect(b).empty() ? a : a.intersect(b);  // a slice of a, the executor's case
    expect_copy_matches_oracle(w, k, a, b);
    expect_copy_matches_oracle(w, k, b, a);
    if (HasFatalFailure()) return;
  }
}

TEST(RegionCopy, DisjointRegionsCopyNothingAndWrongSizesAreErrors) {
  const auto w = copy_workload();
  const Region a{0, 1, 0, 2, 0, kParts}, b{0, 1, 2, 4, 0, kParts};
  const auto src = iota_storage(w, BufKind::Kv, a, 1.0f);
  std::vector<float> dst(std::size_t(storage(w, BufKind::Kv, b)), -3.0f);
  ASSERT_TRUE(copy_region(w, kRanks, kParts, BufKind::Kv, a, src, b, dst).ok());
  for (float v : dst) ASSERT_EQ(v, -3.0f);
  dst.pop_back();
  const auto s = copy_region(w, kRanks, kParts, BufKind::Kv, a, src, b, dst);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message().find("floats"), std::string::npos) << s.error().message();
}

// ---------------------------------------------------------------------------
// Rule violations: an error naming the op, never undefined behaviour.

std::string run_error(const ir::Plan& plan) {
  const auto in = plan_inputs(plan.workload, 1);
  auto res = run_threads_unvalidated(plan, in, RunOptions{10});
  return res.ok() ? std::string("(ran)") : res.error().message();
}

ir::Workload small_fwd() {
  auto w = workload_of({2, true, ir::Layout::Contiguous, true, ir::PassKind::Fwd});
  w.seq = 32;
  return w;
}

TEST(RegionRules, MergeOfDifferentRegionsIsAnError) {
  const auto w = small_fwd();
  sched::PlanBuilder b("t", w, 2, 1);
  for (int r = 0; r < 2; ++r) {
    const BufferId a = b.buffer(r, BufKind::Out, Region{r, r + 1, 0, 2, 0, 1}, BufInit::Zero);
    const BufferId out = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    b.merge(Stream::Compute, a, out);
    b.results(r).out = out;
  }
  const auto msg = run_error(std::move(b).finish());
  EXPECT_NE(msg.find("merge"), std::string::npos) << msg;
  EXPECT_NE(msg.find("different regions"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" op "), std::string::npos) << msg;
}

TEST(RegionRules, ComputeOverDifferentHeadsIsAnError) {
  const auto w = small_fwd();
  sched::PlanBuilder b("t", w, 2, 1);
  BufferId other = ir::kNone;
  ir::OpId op = ir::kNone;
  for (int r = 0; r < 2; ++r) {
    const BufferId q = b.buffer(r, BufKind::Q, r, BufInit::Input), kv = b.buffer(r, BufKind::Kv, r, BufInit::Input);
    const BufferId qs = b.buffer(r, BufKind::Q, Region{r, r + 1, 0, 2, 0, 1}, BufInit::None);
    const BufferId ks = b.buffer(r, BufKind::Kv, Region{r, r + 1, 0, 2, 0, 1}, BufInit::None);
    const BufferId ks2 = b.buffer(r, BufKind::Kv, Region{r, r + 1, 2, 4, 0, 1}, BufInit::None);
    b.copy(Stream::Compute, q, qs);
    b.copy(Stream::Compute, kv, ks);
    b.copy(Stream::Compute, kv, ks2);
    const BufferId acc = b.buffer(r, BufKind::Out, Region{r, r + 1, 0, 2, 0, 1}, BufInit::Zero);
    const ir::OpId c = b.compute_fwd(qs, ks, acc);
    if (r == 0) {
      op = c;
      other = ks2;
    }
    const BufferId out = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    b.copy(Stream::Compute, acc, out);
    b.results(r).out = out;
  }
  auto plan = std::move(b).finish();
  plan.op(op).buf[1] = other;  // kv heads 2-3 against queries of kv heads 0-1
  const auto msg = run_error(plan);
  EXPECT_NE(msg.find("rank 0 op " + std::to_string(op)), std::string::npos) << msg;
  EXPECT_NE(msg.find("different kv heads"), std::string::npos) << msg;
}

TEST(RegionRules, CopyBetweenUnrelatedRegionsIsAnError) {
  const auto w = small_fwd();
  sched::PlanBuilder b("t", w, 2, 1);
  ir::OpId op = ir::kNone;
  BufferId other = ir::kNone;
  for (int r = 0; r < 2; ++r) {
    const BufferId q = b.buffer(r, BufKind::Q, r, BufInit::Input);
    const BufferId a = b.buffer(r, BufKind::Q, Region{r, r + 1, 0, 2, 0, 1}, BufInit::None);
    const BufferId c = b.buffer(r, BufKind::Q, Region{r, r + 1, 1, 3, 0, 1}, BufInit::None);
    const ir::OpId id = b.copy(Stream::Compute, q, a);
    if (r == 0) {
      op = id;
      other = c;
    }
    const BufferId out = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    b.results(r).out = out;
    b.merge(Stream::Compute, b.buffer(r, BufKind::Out, r, BufInit::Zero), out);
  }
  auto plan = std::move(b).finish();
  plan.op(op).buf[0] = other;  // heads 1-2 into heads 0-1: neither contains the other
  const auto msg = run_error(plan);
  EXPECT_NE(msg.find("neither region contains the other"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 op " + std::to_string(op)), std::string::npos) << msg;
}

TEST(RegionRules, ReceiveIntoAnotherRegionIsAnError) {
  const auto w = small_fwd();
  sched::PlanBuilder b("t", w, 2, 1);
  const BufferId q0 = b.buffer(0, BufKind::Q, 0, BufInit::Input);
  const BufferId s = b.buffer(0, BufKind::Q, Region{0, 1, 0, 2, 0, 1}, BufInit::None);
  b.copy(Stream::Compute, q0, s);
  const BufferId d = b.buffer(1, BufKind::Q, Region{0, 1, 2, 4, 0, 1}, BufInit::None);  // same size, other heads
  const auto t = b.transfer(Stream::Q, s, 1, ir::kNone, ir::kNone, {}, {}, d);
  for (int r = 0; r < 2; ++r) {
    const BufferId out = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    b.results(r).out = out;
  }
  const auto msg = run_error(std::move(b).finish());
  EXPECT_NE(msg.find("rank 1 op " + std::to_string(t.recv)), std::string::npos) << msg;
  EXPECT_NE(msg.find("same kind and region"), std::string::npos) << msg;
}

TEST(RegionRules, ResultsMustBeWholeShards) {
  const auto w = small_fwd();
  sched::PlanBuilder b("t", w, 2, 1);
  for (int r = 0; r < 2; ++r) b.results(r).out = b.buffer(r, BufKind::Out, Region{r, r + 1, 0, 2, 0, 1}, BufInit::Zero);
  const auto msg = run_error(std::move(b).finish());
  EXPECT_NE(msg.find("not one whole shard"), std::string::npos) << msg;
}

TEST(RegionRules, AnInputIsItsOwnRanksShardForTheValidatorAndTheExecutorsAlike) {
  // Rank 0's Q input holding rank 1's shard: owner and rank differ. One rule (ir::check_buffer)
  // refuses it in the validator and in every executor's storage, with one message.
  const auto w = small_fwd();
  sched::PlanBuilder b("t", w, 2, 1);
  for (int r = 0; r < 2; ++r) {
    const BufferId q = b.buffer(r, BufKind::Q, 1 - r, BufInit::Input);
    const BufferId kv = b.buffer(r, BufKind::Kv, r, BufInit::Input);
    b.results(r).out = b.buffer(r, BufKind::Out, 1 - r, BufInit::Zero);
    (void)b.compute_fwd(q, kv, b.results(r).out);
  }
  const ir::Plan plan = std::move(b).finish();
  const auto rule = ir::check_buffer(plan, 0);
  ASSERT_FALSE(rule.ok());
  EXPECT_EQ(rule.error().message(),
            "buffer 0 (q1): an input must be the whole shard of its rank 0 (its own input tensor), not another "
            "rank's, a region or a view");
  const auto report = sched::validate(plan);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.summary(plan).find(rule.error().message()), std::string::npos) << report.summary(plan);
  // Both ranks hold such an input and run at once: the executor reports whichever rank's worker
  // reaches its buffer first, each with the rule's own message for that buffer.
  std::vector<std::string> rules;
  for (std::size_t id = 0; id < plan.buffers().size(); ++id)
    if (const auto st = ir::check_buffer(plan, BufferId(id)); !st) rules.push_back(st.error().message());
  ASSERT_EQ(rules.size(), 2u);  // q1 on rank 0, q0 on rank 1
  const auto msg = run_error(plan);
  EXPECT_TRUE(msg.find(rules[0]) != std::string::npos || msg.find(rules[1]) != std::string::npos) << msg;
}

TEST(RegionRules, PartsThatDoNotDivideTheShardAreAnError) {
  const auto w = small_fwd();  // 16 tokens per shard
  sched::PlanBuilder b("t", w, 2, 1);
  b.set_parts(3);
  for (int r = 0; r < 2; ++r) {
    const BufferId q = b.buffer(r, BufKind::Q, r, BufInit::Input);
    const BufferId s = b.buffer(r, BufKind::Q, Region{r, r + 1, 0, 4, 0, 1}, BufInit::None);
    b.copy(Stream::Compute, q, s);
    b.results(r).out = b.buffer(r, BufKind::Out, r, BufInit::Zero);
  }
  const auto msg = run_error(std::move(b).finish());
  EXPECT_NE(msg.find("do not divide"), std::string::npos) << msg;
}

}  // namespace
}  // namespace charm::rt

// The one stall rule both executors report by: a transfer the plan gives no counterpart, else a transfer,
// else the first waiting op.
TEST(StallRule, AnOrphanTransferThenATransferThenTheFirst) {
  using W = charm::rt::WaitingOp;
  EXPECT_EQ(charm::rt::stall_root_cause(std::vector<W>{}), 0u);  // none waits: the size
  EXPECT_EQ(charm::rt::stall_root_cause(std::vector<W>{{false, false}, {false, false}}), 0u);
  EXPECT_EQ(charm::rt::stall_root_cause(std::vector<W>{{false, false}, {true, false}, {true, false}}), 1u);
  EXPECT_EQ(charm::rt::stall_root_cause(std::vector<W>{{true, false}, {false, false}, {true, true}, {true, true}}), 2u);
}

// ---------------------------------------------------------------------------
// The peak of a rank's buffers.

// op_order_peak_bytes is what the executor's store measures when each rank runs its ops one at a time in plan
// order: views in their roots, inputs from their first use, results kept. The plans span whole shards (ring,
// charm), gathered regions with views (usp, ulysses) and token parts (tasp, which plans a forward pass only), the
// others with both passes.
TEST(BufferPeak, OpOrderPeakIsTheStoresPeakOneOpAtATime) {
  charm::ir::Workload w;
  w.seq = 64;
  w.heads = 4;
  w.kv_heads = 4;
  w.head_dim = 8;
  w.causal = true;
  for (const char* algo : {"ring", "charm", "usp", "ulysses", "tasp"}) {
    w.pass = std::string(algo) == "tasp" ? charm::ir::PassKind::Fwd : charm::ir::PassKind::Both;  // forward only
    auto plan = charm::sched::make_plan({algo, w, 4, 2});
    ASSERT_TRUE(plan) << algo << ": " << plan.error().message();
    std::size_t measured = 0;
    for (charm::ir::RankId r = 0; r < plan->ranks; ++r) {
      charm::rt::BufferStore store(*plan, r,
                                   [](const charm::ir::Buffer&, std::span<float>) { return charm::Status{}; });
      for (const charm::ir::Op& op : plan->ops()) {
        if (op.rank != r) continue;
        charm::ir::for_each_access(op, [&](charm::ir::BufferId b, int, bool) {
          if (b != charm::ir::kNone) {
            ASSERT_TRUE(bool(store.get(b))) << algo << " buffer " << b;
          }
        });
        store.release(op);
      }
      measured = std::max(measured, store.peak_bytes());
    }
    EXPECT_GT(measured, 0u) << algo;
    EXPECT_EQ(charm::rt::op_order_peak_bytes(*plan), measured) << algo;
  }
}
