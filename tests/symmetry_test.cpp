// Rank symmetry of the plans: plan_symmetry agrees with ir::check_symmetric, and the planner's
// quotient plans (PlanBuilder's quotient mode) equal ir::quotient_of of the full plans, op for op.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "scheduler/planners/plan_builder.hpp"
#include "scheduler/planners/planners.hpp"

using namespace charm;
using ir::RankSymmetry;

namespace {

using Kind = RankSymmetry::Kind;

std::string buffer_text(const ir::Buffer& b) {
  return fmt::format("rank {} {} owners {}+{} init {} bytes {} heads {}+{} parts {}+{} parent {} reuse {}", b.rank,
                     ir::to_string(b.kind), b.owner, b.owners, ir::to_string(b.init), b.bytes, b.head_begin, b.heads,
                     b.part_begin, b.parts, b.parent, b.reuse);
}

bool same_buffer(const ir::Buffer& a, const ir::Buffer& b) {
  return a.rank == b.rank && a.kind == b.kind && a.owner == b.owner && a.init == b.init && a.bytes == b.bytes &&
         a.owners == b.owners && a.head_begin == b.head_begin && a.heads == b.heads && a.part_begin == b.part_begin &&
         a.parts == b.parts && a.parent == b.parent && a.reuse == b.reuse;
}

bool same_op(const ir::Op& a, const ir::Op& b) {
  return a.rank == b.rank && a.stream == b.stream && a.kind == b.kind && a.phase == b.phase && a.mask == b.mask &&
         a.q_owner == b.q_owner && a.kv_owner == b.kv_owner && a.peer == b.peer && a.tag == b.tag &&
         a.group == b.group && a.bytes == b.bytes && a.flops == b.flops && std::equal(a.buf, a.buf + 4, b.buf);
}

/// The first difference between two plans, field by field ("" if they are equal).
std::string first_difference(const ir::Plan& want, const ir::Plan& got) {
  if (want.algo != got.algo || want.ranks != got.ranks || want.domains != got.domains || want.parts != got.parts ||
      want.workload.pass != got.workload.pass || !(want.symmetry == got.symmetry))
    return "the plans' headers differ";
  if (want.buffers().size() != got.buffers().size())
    return fmt::format("{} buffers, want {}", got.buffers().size(), want.buffers().size());
  for (std::size_t b = 0; b < want.buffers().size(); ++b)
    if (!same_buffer(want.buffers()[b], got.buffers()[b]))
      return fmt::format("buffer {}: {}, want {}", b, buffer_text(got.buffers()[b]), buffer_text(want.buffers()[b]));
  if (want.size() != got.size()) return fmt::format("{} ops, want {}", got.size(), want.size());
  for (ir::OpId id = 0; id < ir::OpId(want.size()); ++id) {
    if (!same_op(want.op(id), got.op(id)))
      return fmt::format("op {}: {} on rank {}, want {} on rank {}", id, ir::op_label(got, id), got.op(id).rank,
                         ir::op_label(want, id), want.op(id).rank);
    const auto dw = want.deps(id), dg = got.deps(id);
    if (!std::equal(dw.begin(), dw.end(), dg.begin(), dg.end()))
      return fmt::format("op {} ({}): dependencies [{}], want [{}]", id, ir::op_label(want, id),
                         fmt::join(dg.begin(), dg.end(), " "), fmt::join(dw.begin(), dw.end(), " "));
  }
  if (want.results().size() != got.results().size()) return "result counts differ";
  for (std::size_t r = 0; r < want.results().size(); ++r) {
    const auto &a = want.results()[r], &b = got.results()[r];
    if (a.out != b.out || a.dq != b.dq || a.dkv != b.dkv)
      return fmt::format("results of rank {}: out {} dq {} dkv {}, want {} {} {}", r, b.out, b.dq, b.dkv, a.out, a.dq,
                         a.dkv);
  }
  return {};
}

struct Case {
  sched::PlanRequest req;
  std::string label;
};

ir::Workload base_workload() {
  ir::Workload w;
  w.seq = 1182720;  // 2^6 * 3 * 5 * 7 * 11 * 16: whole zigzag chunks and TASP parts on every rank count here
  w.heads = w.kv_heads = 96;
  return w;
}

/// Every algorithm's requests: passes, masks, layouts, rank counts (64 for ring and charm), domain
/// counts (charm, usp), and at 8 ranks two more workloads (batch, dtype, GQA, head size).
std::vector<Case> requests(const std::string& algo) {
  std::vector<Case> out;
  const bool big = algo == "ring" || algo == "charm";
  const bool any_count =
      algo == "ring" || algo == "ring-zigzag" || algo == "allgather-kv" || algo == "tasp" || algo == "tasp-zigzag";
  std::vector<int> counts{4, 8, 16, 32};
  if (big) counts.push_back(64);
  if (any_count) counts.insert(counts.end(), {6, 12});
  for (int n : counts)
    for (int d : {1, 2, 4, 8, 64})
      for (int variant = 0; variant < (n == 8 ? 3 : 1); ++variant)
        for (auto pass : {ir::PassKind::Fwd, ir::PassKind::Bwd, ir::PassKind::Both})
          for (bool causal : {false, true})
            for (auto layout : {ir::Layout::Contiguous, ir::Layout::Zigzag}) {
              if (d > n || (d > 1 && !sched::uses_domains(algo))) continue;
              sched::PlanRequest req{algo, base_workload(), n, d};
              auto& w = req.workload;
              if (variant == 1) w.batch = 3, w.dtype = ir::DType::FP32, w.kv_heads = 48, w.head_dim = 64;
              if (variant == 2) w.dtype = ir::DType::FP16, w.heads = 192;
              w.pass = pass;
              w.causal = causal;
              w.layout = layout;
              if (!sched::check_request(req).ok()) continue;  // tasp's backward, merge on 6 ranks, ...
              out.push_back({req, fmt::format("{} n={} d={} {} {} {} workload {}", algo, n, d, ir::to_string(pass),
                                              causal ? "causal" : "full", ir::to_string(layout), variant)});
            }
  // Packed documents of one length, which repeat every few ranks (and some that do not).
  for (int n : {4, 8, 16})
    for (int d : {1, 2, 4})
      for (auto pass : {ir::PassKind::Fwd, ir::PassKind::Both})
        for (auto [num, den] : {std::pair{1, 2}, std::pair{2, 1}, std::pair{4, 1}, std::pair{3, 2}}) {
          if ((d > 1 && !sched::uses_domains(algo)) || d >= n) continue;
          sched::PlanRequest req{algo, base_workload(), n, d};
          auto& w = req.workload;
          w.pass = pass;
          w.causal = true;
          const std::int64_t len = w.seq / n * num / den;  // documents of num/den shards each
          if (w.seq % len != 0) continue;
          w.documents.assign(std::size_t(w.seq / len), len);
          if (!sched::check_request(req).ok()) continue;
          out.push_back({req, fmt::format("{} n={} d={} {} documents of {}/{} shards", algo, n, d, ir::to_string(pass),
                                          num, den)});
        }
  return out;
}

/// The well-formed symmetries of `kind` on n ranks with a block below `below`.
std::vector<RankSymmetry> smaller(Kind kind, int n, int below) {
  std::vector<RankSymmetry> out;
  for (int b = 1; b < below; ++b)
    if (ir::check_symmetry_shape({kind, b}, n).ok()) out.push_back({kind, b});
  return out;
}

std::string name_of(const ::testing::TestParamInfo<std::string>& i) {
  std::string a = i.param;
  for (auto& ch : a)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = ch == '+' ? 'p' : '_';
  return a;
}

}  // namespace

class EveryAlgorithm : public ::testing::TestWithParam<std::string> {};

// The table gives a symmetry the plan has, and no smaller block of either kind is one; where it
// gives none, no proper block is one.
TEST_P(EveryAlgorithm, PlanSymmetryIsWhatTheCheckerProves) {
  int active = 0, failures = 0;
  for (const auto& c : requests(GetParam())) {
    if (failures >= 5) break;
    auto full = sched::make_plan(c.req);
    ASSERT_TRUE(full.ok()) << c.label << ": " << full.error().message();
    const RankSymmetry s = sched::plan_symmetry(c.req);
    if (s.active()) {
      ++active;
      if (auto st = ir::check_symmetric(*full, s); !st) {
        ADD_FAILURE() << c.label << ": the table's " << ir::to_string(s.kind) << "/" << s.block
                      << " fails: " << st.error().message();
        ++failures;
        continue;
      }
    }
    // Under documents a schedule of visible pairs alone (rm+, charm) may lose structure the table's
    // block keeps (documents inside domains never cross them): a smaller block may hold there too.
    if (!c.req.workload.documents.empty() && s.active()) continue;
    const int below = s.active() ? s.block : c.req.ranks;
    for (Kind k : {Kind::Rotate, Kind::Xor})
      for (const RankSymmetry& t : smaller(k, c.req.ranks, below))
        if (ir::check_symmetric(*full, t).ok()) {
          ADD_FAILURE() << c.label << ": " << ir::to_string(k) << "/" << t.block << " holds, the table gives "
                        << ir::to_string(s.kind) << "/" << s.block;
          ++failures;
        }
  }
  EXPECT_GT(active, 0) << GetParam() << " has symmetric requests";
}

// For every symmetric request and every coarsening of its symmetry, the planner's quotient plan is
// the full plan's quotient, op for op.
TEST_P(EveryAlgorithm, QuotientPlansEqualTheFullPlansQuotients) {
  int quotients = 0, failures = 0;
  for (const auto& c : requests(GetParam())) {
    const RankSymmetry s = sched::plan_symmetry(c.req);
    if (!s.active() || failures >= 5) continue;
    auto full = sched::make_plan(c.req);
    ASSERT_TRUE(full.ok()) << c.label;
    for (int block = s.block; block < c.req.ranks; block += s.block) {
      RankSymmetry coarse = s;
      coarse.block = block;
      if (!ir::check_symmetry_shape(coarse, c.req.ranks).ok()) continue;
      auto q = sched::make_plan(c.req, coarse);
      ASSERT_TRUE(q.ok()) << c.label << " block " << block << ": " << q.error().message();
      ++quotients;
      if (auto diff = first_difference(ir::quotient_of(*full, coarse), *q); !diff.empty()) {
        ADD_FAILURE() << c.label << ", quotient " << ir::to_string(s.kind) << "/" << block << ": " << diff;
        ++failures;
        break;
      }
    }
  }
  EXPECT_GT(quotients, 0);
}

// On the causal zigzag layout the two half pieces are all that tells ranks apart: with them taken as
// one (a cost model that prices them alike), the plan has its unmasked symmetry, and the planner's quotient
// under it is the full plan's.
TEST_P(EveryAlgorithm, CausalZigzagIsSymmetricUpToItsHalfPieces) {
  int active = 0, failures = 0;
  for (const auto& c : requests(GetParam())) {
    const auto& w = sched::normalised(c.req).workload;
    if (!w.causal || w.layout != ir::Layout::Zigzag || !w.documents.empty() || failures >= 5) continue;
    if (sched::plan_symmetry(c.req).active()) continue;  // symmetric by label already (usp)
    const RankSymmetry s = sched::plan_symmetry(c.req, /*zigzag_halves_alike=*/true);
    if (!s.active()) continue;
    ++active;
    EXPECT_TRUE(s.zigzag_halves_alike) << c.label;
    auto full = sched::make_plan(c.req);
    ASSERT_TRUE(full.ok()) << c.label;
    if (auto st = ir::check_symmetric(*full, s); !st) {
      ADD_FAILURE() << c.label << ": " << st.error().message();
      ++failures;
      continue;
    }
    auto q = sched::make_plan(c.req, s);
    ASSERT_TRUE(q.ok()) << c.label << ": " << q.error().message();
    if (auto diff = first_difference(ir::quotient_of(*full, s), *q); !diff.empty()) {
      ADD_FAILURE() << c.label << ": " << diff;
      ++failures;
    }
  }
  std::cout << GetParam() << ": " << active << " causal zigzag requests symmetric up to their half pieces\n";
}

INSTANTIATE_TEST_SUITE_P(Symmetry, EveryAlgorithm, ::testing::ValuesIn(sched::algorithm_names()), name_of);

TEST(CheckSymmetric, FailsOnACausalRingNamingTheRankAndOp) {
  sched::PlanRequest req{"ring", base_workload(), 8, 1};
  req.workload.causal = true;
  auto plan = sched::make_plan(req);
  ASSERT_TRUE(plan.ok());
  const auto st = ir::check_symmetric(*plan, {Kind::Rotate, 1});
  ASSERT_FALSE(st.ok());
  const std::string m = st.error().message();
  EXPECT_NE(m.find("rank 1 is not the image of rank 0 under rotate symmetry, block 1"), std::string::npos) << m;
  // Both ranks first compute their diagonal block; then rank 1 sees KV0, while rank 0's KV7 is masked.
  EXPECT_NE(m.find("stream compute op 1 (fwd Q1*KV0 full): rank 0 has no op there"), std::string::npos) << m;
}

TEST(CheckSymmetric, FindsOneChangedOpOrBuffer) {
  sched::PlanRequest req{"ring", base_workload(), 8, 1};
  req.workload.pass = ir::PassKind::Both;
  const auto plan = sched::make_plan(req);
  ASSERT_TRUE(plan.ok());
  ASSERT_TRUE(ir::check_symmetric(*plan, {Kind::Rotate, 1}).ok());
  ASSERT_TRUE(ir::check_symmetric(*plan, {Kind::Rotate, 2}).ok());
  auto last_op_of = [&](ir::RankId r, ir::OpKind k) {
    ir::OpId found = ir::kNone;
    for (ir::OpId id = 0; id < ir::OpId(plan->size()); ++id)
      if (plan->op(id).rank == r && plan->op(id).kind == k) found = id;
    return found;
  };
  {
    ir::Plan p = *plan;  // one compute of rank 5 computes more
    p.op(last_op_of(5, ir::OpKind::Compute)).flops *= 2;
    const auto st = ir::check_symmetric(p, {Kind::Rotate, 1});
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message().find("rank 5 "), std::string::npos) << st.error().message();
    EXPECT_NE(st.error().message().find("bytes or flops"), std::string::npos) << st.error().message();
  }
  {
    ir::Plan p = *plan;  // one send of rank 3 goes to the wrong peer
    p.op(last_op_of(3, ir::OpKind::Send)).peer = 6;
    const auto st = ir::check_symmetric(p, {Kind::Rotate, 1});
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message().find("rank 3 "), std::string::npos) << st.error().message();
  }
  {
    ir::Plan p = *plan;  // one dependency of rank 2 dropped
    const ir::OpId id = last_op_of(2, ir::OpKind::Compute);
    ASSERT_FALSE(p.deps(id).empty());
    p.set_deps(id, {});
    const auto st = ir::check_symmetric(p, {Kind::Rotate, 1});
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.error().message().find("rank 2 "), std::string::npos) << st.error().message();
  }
}

TEST(CheckSymmetric, RefusesQuotientsAndMalformedGroups) {
  sched::PlanRequest req{"merge", base_workload(), 8, 1};
  const auto plan = sched::make_plan(req);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(ir::check_symmetric(*plan, {Kind::Xor, 1}).ok());
  EXPECT_FALSE(ir::check_symmetric(*plan, {}).ok());
  EXPECT_FALSE(ir::check_symmetric(*plan, {Kind::Xor, 3}).ok());
  EXPECT_FALSE(ir::check_symmetric(ir::quotient_of(*plan, {Kind::Xor, 1}), {Kind::Xor, 1}).ok());
}

TEST(MakePlanQuotient, RefusesWhatIsNoCoarseningOfThePlansSymmetry) {
  sched::PlanRequest ring{"ring", base_workload(), 8, 1};
  ASSERT_EQ(sched::plan_symmetry(ring), (RankSymmetry{Kind::Rotate, 1}));
  auto wrong_kind = sched::make_plan(ring, {Kind::Xor, 1});
  ASSERT_FALSE(wrong_kind.ok());
  EXPECT_NE(wrong_kind.error().message().find("does not coarsen the plan's, rotate in blocks of 1"), std::string::npos)
      << wrong_kind.error().message();
  EXPECT_FALSE(sched::make_plan(ring, {Kind::Rotate, 3}).ok());  // does not divide 8 ranks

  sched::PlanRequest charm{"charm", base_workload(), 16, 4};
  ASSERT_EQ(sched::plan_symmetry(charm), (RankSymmetry{Kind::Rotate, 4}));
  EXPECT_FALSE(sched::make_plan(charm, {Kind::Rotate, 2}).ok());  // finer than the plan's
  EXPECT_FALSE(sched::make_plan(charm, {Kind::Xor, 4}).ok());
  EXPECT_TRUE(sched::make_plan(charm, {Kind::Rotate, 8}).ok());

  sched::PlanRequest causal = ring;
  causal.workload.causal = true;
  EXPECT_FALSE(sched::plan_symmetry(causal).active());
  auto none = sched::make_plan(causal, {Kind::Rotate, 1});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find("has no rank symmetry"), std::string::npos) << none.error().message();
  // Ulysses' ranks hold other heads: a symmetry by cost, which its quotient plans carry.
  const sched::PlanRequest ulysses{"ulysses", base_workload(), 8, 1};
  EXPECT_EQ(sched::plan_symmetry(ulysses), (RankSymmetry{Kind::Rotate, 1, true}));
  auto by_cost = sched::make_plan(ulysses, {Kind::Rotate, 2});
  ASSERT_TRUE(by_cost.ok()) << by_cost.error().message();
  EXPECT_EQ(by_cost->symmetry, (RankSymmetry{Kind::Rotate, 2, true}));
  // The check is Quotient::of's, once: what it makes carries the plan's flags, and the planner takes it as it is.
  const auto checked = sched::CheckedRequest::check(ulysses);
  ASSERT_TRUE(checked.ok());
  const auto q = sched::Quotient::of(*checked, {Kind::Rotate, 2});
  ASSERT_TRUE(q.ok()) << q.error().message();
  EXPECT_EQ(q->symmetry(), (RankSymmetry{Kind::Rotate, 2, true}));
  EXPECT_FALSE(sched::Quotient::of(*checked, {Kind::Rotate, 3}).ok());
  EXPECT_FALSE(sched::Quotient::of(*checked, {}).value().active());  // none: the full plan
  auto from_checked = sched::make_plan(*checked, *q);
  ASSERT_TRUE(from_checked.ok()) << from_checked.error().message();
  EXPECT_EQ(from_checked->size(), by_cost->size());
  EXPECT_FALSE(sched::make_plan(ulysses, {Kind::Xor, 1}).ok());
}

TEST(MakePlanQuotient, InactiveQuotientGivesTheFullPlan) {
  sched::PlanRequest req{"allgather-kv", base_workload(), 8, 1};
  req.workload.pass = ir::PassKind::Both;
  const auto full = sched::make_plan(req), same = sched::make_plan(req, RankSymmetry{});
  ASSERT_TRUE(full.ok() && same.ok());
  EXPECT_EQ(first_difference(*full, *same), "");
}

TEST(MakePlanQuotient, HoldsTheRepresentativesOnlyAndCountsItsPhantoms) {
  sched::PlanRequest req{"ring", base_workload(), 64, 1};
  req.workload.pass = ir::PassKind::Both;
  sched::QuotientStats stats;
  const auto q = sched::make_plan(req, {Kind::Rotate, 4}, &stats);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->ranks, 64);
  EXPECT_EQ(q->symmetry, (RankSymmetry{Kind::Rotate, 4}));
  for (const auto& op : q->ops()) EXPECT_LT(op.rank, 4);
  for (const auto& b : q->buffers()) EXPECT_LT(b.rank, 4);
  ASSERT_EQ(q->results().size(), 64u);
  for (std::size_t r = 0; r < 64; ++r)
    EXPECT_EQ(q->results()[r].out != ir::kNone, r < 4) << "rank " << r;  // phantoms' results are none
  // Every buffer the full plan has on ranks 4..63 was made as a phantom; whole shards cost no memory.
  const auto full = sched::make_plan(req);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(stats.phantom_buffers, full->buffers().size() - q->buffers().size());
  EXPECT_EQ(stats.phantom_bytes, 0u);
}

TEST(PhantomBuffers, RoundTripsEveryKindOfBuffer) {
  ir::Workload w = base_workload();
  // 8,192 ranks: whole shards no longer fit the ids (they take 16-byte records); 64: they do.
  for (int ranks : {64, 8192}) {
    sched::PhantomBuffers store(w, ranks, 4);
    const int parts = 1;
    auto shard = [&](ir::RankId rank, ir::BufKind kind, ir::RankId owner, ir::BufInit init, int owners) {
      ir::Buffer b{.rank = rank, .kind = kind, .init = init, .owner = owner};
      b.owners = owners;
      ir::Region r = ir::shard_region(owner, w, parts);
      r.owner_end = owner + owners;
      b.bytes = ir::region_bytes(w, ranks, parts, kind, r);
      return b;
    };
    std::vector<ir::Buffer> made{shard(4, ir::BufKind::Kv, 0, ir::BufInit::None, 1),
                                 shard(ranks - 1, ir::BufKind::Dkv, ranks - 1, ir::BufInit::Zero, 1),
                                 shard(5, ir::BufKind::QBundle, 3, ir::BufInit::Input, 1),
                                 shard(6, ir::BufKind::Out, 8, ir::BufInit::Zero, 4)};
    ir::Buffer sliced = shard(7, ir::BufKind::Q, 2, ir::BufInit::None, 2);
    sliced.head_begin = 8;
    sliced.heads = 8;
    sliced.bytes /= 12;
    made.push_back(sliced);
    std::vector<ir::BufferId> ids;
    for (const auto& b : made) ids.push_back(store.add(b, parts));
    ir::Buffer view = made.back();
    view.parent = ids.back();
    view.owners = 1;
    view.bytes /= 2;
    made.push_back(view);
    ids.push_back(store.add(view, parts));
    for (std::size_t i = 0; i < made.size(); ++i) {
      EXPECT_LE(ids[i], -2) << "phantom ids stay clear of kNone and the plan's ids";
      EXPECT_TRUE(same_buffer(store.get(ids[i], parts), made[i]))
          << ranks << " ranks, buffer " << i << ": " << buffer_text(store.get(ids[i], parts)) << ", want "
          << buffer_text(made[i]);
    }
    EXPECT_EQ(store.count(), made.size());
    EXPECT_GT(store.memory_bytes(), 0u);  // regions and views (and at 8,192 ranks shards) are stored
  }
}

TEST(EstimateQuotientPlan, CoversWhatThePlannerMakes) {
  for (const char* algo : {"ring", "merge", "allgather-kv", "charm", "rm+"})
    for (auto pass : {ir::PassKind::Fwd, ir::PassKind::Both}) {
      sched::PlanRequest req{algo, base_workload(), 64, std::string(algo) == "charm" ? 8 : 1};
      req.workload.pass = pass;
      const RankSymmetry s = sched::plan_symmetry(req);
      ASSERT_TRUE(s.active()) << algo;
      sched::QuotientStats stats;
      const auto q = sched::make_plan(req, s, &stats);
      ASSERT_TRUE(q.ok());
      const auto e = sched::estimate_quotient_plan(req, s);
      const std::string what = fmt::format("{} {}", algo, ir::to_string(pass));
      EXPECT_GE(e.ops, 0.9 * double(q->size())) << what;
      EXPECT_LE(e.ops, 1.3 * double(q->size()) + 64) << what;
      EXPECT_GE(e.phantom_buffers, 0.9 * double(stats.phantom_buffers)) << what;
      EXPECT_LE(e.phantom_buffers, 2.0 * double(stats.phantom_buffers)) << what;
      EXPECT_GE(e.plan_bytes, double(q->memory_bytes()) / 2) << what;
    }
}

namespace {
// estimate_plan against the plans themselves, full and causal: a causal plan on the contiguous layout skips the
// blocks its mask hides (about half), and the estimate that refuses a request up front must count that.
TEST(EstimatePlan, CountsTheMaskedPlan) {
  for (const auto& algo : sched::algorithm_names())
    for (const int domains : {1, 2, 4, 8})
      for (auto pass : {ir::PassKind::Fwd, ir::PassKind::Both})
        for (int mask = 0; mask < 4; ++mask)  // full, causal, documents of two shards, a window of half a shard
          for (auto layout : {ir::Layout::Contiguous, ir::Layout::Zigzag}) {
            if (domains > 1 && !sched::uses_domains(algo)) continue;
            sched::PlanRequest req{algo, base_workload(), 32, domains};
            const bool causal = mask > 0;
            if (mask >= 2 && layout == ir::Layout::Zigzag) continue;  // counted whole: an over-estimate
            req.workload.pass = pass;
            req.workload.causal = causal;
            req.workload.layout = layout;
            const std::int64_t shard = req.workload.seq / 32;
            if (mask == 2) req.workload.documents.assign(16, 2 * shard);
            if (mask == 3) req.workload.window = shard / 2;
            req = sched::normalised(req);
            if (mask >= 2 && req.workload.layout == ir::Layout::Zigzag) continue;  // ring-zigzag, tasp-zigzag
            if (!sched::check_request(req)) continue;
            const auto plan = sched::make_plan(req);
            ASSERT_TRUE(plan.ok()) << algo;
            const auto e = sched::estimate_plan(req);
            const double real = double(plan->size()), est = e.ops;
            const std::string what = fmt::format("{} in {} domains {} {} {}: estimate {} ops, plan {}; estimate {} "
                                                 "bytes, plan {}",
                                                 algo, domains, ir::to_string(pass), req.workload.mask_text(),
                                                 ir::to_string(layout), est, real, e.plan_bytes, plan->memory_bytes());
            if (std::getenv("CHARM_PRINT_ESTIMATES") != nullptr) std::printf("%s\n", what.c_str());
            EXPECT_GE(est, real) << what;  // it refuses up front: never under
            // Under documents and windows rm+ and charm plan fewer ops per visible block than their dense
            // rate (no merges across hidden pairs): counted by blocks, they are over-estimated (3 to 6x here;
            // without the mask's share it was 60x).
            EXPECT_LE(est, (mask >= 2 ? 6.0 : 1.5) * real) << what;
            EXPECT_GE(e.plan_bytes, double(plan->memory_bytes()) / 2) << what;
            // Bytes count the planner's tables at the peak too (kPlanBytesPerOp), over the plan's own.
            EXPECT_LE(e.plan_bytes, (mask >= 2 ? 8.0 : 4.0) * double(plan->memory_bytes())) << what;
          }
}
}  // namespace
