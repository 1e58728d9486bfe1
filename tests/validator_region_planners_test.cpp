// The validator on planner-made region plans (USP, Ulysses, TASP) and on token parts fragmented into bitmaps.
#include <gtest/gtest.h>

#include <algorithm>

#include "scheduler/planners/plan_builder.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"
#include "validator_region_test_support.hpp"

using namespace charm;
using namespace charm::ir;
using sched::PlanBuilder;
using namespace charm::ir::test_support;

TEST(ValidatorRegions, BackwardRegionPlansAreCheckedCellByCell) {
  // USP both passes (2 groups of 2): drop one backward compute -> dQ and dK/dV
  // cells miss blocks; duplicate one -> computed twice; drop a forward compute ->
  // the bundle is packed from an output that is not final.
  sched::PlanRequest req;
  req.algo = "usp";
  req.ranks = 4;
  req.domains = 2;
  req.workload = workload(true);
  req.workload.pass = PassKind::Both;
  auto made = sched::make_plan(req);
  ASSERT_TRUE(made.ok()) << made.error().message();
  const Plan base = std::move(made).value();
  ASSERT_TRUE(base.has_regions());
  ASSERT_EQ(first_rule(base), "ok") << check(base).summary(base);
  {
    Plan p = base;
    // A compute whose buffers no later buffer takes the storage of: its
    // duplicate (appended last) then breaks coverage only, not lifetimes.
    std::vector<char> reused(p.buffers().size(), 0);
    for (const Buffer& b : p.buffers())
      if (b.reuse != kNone) reused[std::size_t(b.reuse)] = 1;
    const OpId c = find(p, [&](const Op& o) {
      if (o.kind != OpKind::Compute || o.phase != Phase::Bwd || o.rank != 3) return false;
      for (BufferId b : o.buf)
        if (b != kNone && reused[std::size_t(p.root(b))]) return false;
      return true;
    });
    (void)duplicate(p, c);
    EXPECT_EQ(first_rule(p), "coverage");
    EXPECT_NE(first_message(p).find("twice"), std::string::npos) << first_message(p);
  }
  {
    Plan p = base;
    OpId last = kNone;
    for (OpId id = 0; id < OpId(p.size()); ++id)
      if (p.op(id).kind == OpKind::Compute && p.op(id).phase == Phase::Bwd && p.op(id).rank == 3) last = id;
    erase(p, last);
    const auto rep = check(p);
    ASSERT_FALSE(rep.ok());
    EXPECT_EQ(rep.violations.front().rule, "coverage");
    bool dq = false, dkv = false;
    for (const auto& v : rep.violations) {
      dq |= v.message.find("final dQ head") != std::string::npos &&
            v.message.find("missing kv blocks") != std::string::npos;
      dkv |= v.message.find("final dK/dV head") != std::string::npos &&
             v.message.find("missing query blocks") != std::string::npos;
    }
    EXPECT_TRUE(dq && dkv) << rep.summary(p);
  }
  {
    Plan p = base;
    OpId last = kNone;
    for (OpId id = 0; id < OpId(p.size()); ++id)
      if (p.op(id).kind == OpKind::Compute && p.op(id).phase == Phase::Fwd && p.op(id).rank == 0) last = id;
    erase(p, last);
    EXPECT_EQ(first_rule(p), "coverage");
    EXPECT_NE(first_message(p).find("packs the backward bundle from an output that is not final"), std::string::npos)
        << first_message(p);
  }
}

TEST(ValidatorRegions, EveryRegionAlgorithmValidatesOnSmallGrids) {
  // The region planners over causal/full, both layouts, their passes (the
  // planners test runs the big grid; this one names the algorithms explicitly).
  int plans = 0;
  for (const char* algo : {"ulysses", "usp", "tasp", "tasp-zigzag"})
    for (int n : {2, 4, 8})
      for (int d : {1, 2})
        for (bool causal : {false, true})
          for (auto pass : {PassKind::Fwd, PassKind::Bwd, PassKind::Both}) {
            sched::PlanRequest req;
            req.algo = algo;
            req.ranks = n;
            req.domains = d;
            req.workload = workload(causal);
            req.workload.kv_heads = 8;
            req.workload.heads = 16;
            req.workload.seq = 1024 * 7 * 8;  // parts = phi(n) divide the shard
            req.workload.pass = pass;
            if (!sched::check_request(req)) continue;
            auto p = sched::make_plan(req);
            ASSERT_TRUE(p.ok()) << p.error().message();
            ++plans;
            EXPECT_EQ(first_rule(*p), "ok") << algo << " n=" << n << " d=" << d << " causal=" << causal << " "
                                            << to_string(pass) << ": " << check(*p).summary(*p);
          }
  EXPECT_GT(plans, 20);
}

TEST(ValidatorRegions, EveryOpOfARegionPlanMatters) {
  // Mutation check: removing any one op of a region plan (a message removes its
  // send and its receive; whoever waited for the op waits for what it waited
  // for) must leave a plan the validator rejects. (Causal USP and TASP plans
  // are left out: their last ring step moves KV parts the receiver has no
  // visible pair with, and USP's backward returns and accumulates the empty
  // dK/dV of such blocks; removing that unused work is rightly not an error.)
  struct Req {
    const char* algo;
    int n, d;
    bool causal;
    PassKind pass;
  };
  for (const Req& c : {Req{"ulysses", 4, 1, true, PassKind::Both}, Req{"ulysses", 2, 1, false, PassKind::Bwd},
                       Req{"usp", 4, 2, false, PassKind::Both}, Req{"usp", 4, 2, false, PassKind::Bwd},
                       Req{"tasp", 5, 1, false, PassKind::Fwd}, Req{"tasp-zigzag", 3, 1, false, PassKind::Fwd}}) {
    sched::PlanRequest req;
    req.algo = c.algo;
    req.ranks = c.n;
    req.domains = c.d;
    req.workload = workload(c.causal);
    req.workload.seq = 1024 * 3 * 5;
    req.workload.pass = c.pass;
    auto made = sched::make_plan(req);
    ASSERT_TRUE(made.ok()) << made.error().message();
    const Plan base = std::move(made).value();
    ASSERT_EQ(first_rule(base), "ok") << c.algo;
    for (OpId id = 0; id < OpId(base.size()); ++id) {
      Plan p = base;
      const Op o = p.op(id);
      OpId partner = kNone;
      if (o.kind == OpKind::Send || o.kind == OpKind::Recv)
        partner = find(p, [&](const Op& x) {
          return x.kind != o.kind && (x.kind == OpKind::Send || x.kind == OpKind::Recv) && x.rank == o.peer &&
                 x.peer == o.rank && x.stream == o.stream && x.tag == o.tag;
        });
      erase(p, std::max(id, partner));
      if (partner != kNone) erase(p, std::min(id, partner));
      EXPECT_NE(first_rule(p), "ok") << c.algo << ": removing op " << id << " (" << op_label(base, id)
                                     << ") goes unnoticed";
    }
  }
}

namespace {
/// Two ranks, 128 token parts: rank 0 computes Q0 against its own KV part by
/// part, even parts first (its output cells fragment into 64 runs each: the
/// validator keeps them as bitmaps); rank 1 does the same for owner 1's KV
/// into a partial output of Q0, sends it to rank 0, which merges it.
struct Scattered {
  Plan plan;
  OpId late_part;  // a compute of rank 0 after its cells went dense
  OpId partial;    // a compute of rank 1 into the partial (the second, if twice)
  OpId merge;
};
Scattered scattered(bool twice_77 = false) {
  PlanBuilder b("hand-scattered", workload(false), 2, 1);
  b.set_parts(128);
  BufferId q[2], kv[2], acc[2];
  for (int r = 0; r < 2; ++r) {
    q[r] = b.buffer(r, BufKind::Q, r, BufInit::Input);
    kv[r] = b.buffer(r, BufKind::Kv, r, BufInit::Input);
    acc[r] = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    b.results(r).out = acc[r];
  }
  Scattered s;
  const BufferId q0 = b.transfer(Stream::Q, q[0], 1).dst;
  const BufferId part_out = b.buffer(1, BufKind::Out, 0, BufInit::Zero);
  for (int r = 0; r < 2; ++r)
    for (int half : {0, 1})
      for (int pk = half; pk < 128; pk += 2) {
        const BufferId part = b.buffer(r, BufKind::Kv, Region{r, r + 1, 0, 4, pk, pk + 1}, BufInit::None);
        b.copy(Stream::Kv, kv[r], part);
        const OpId c = b.compute_fwd(r == 0 ? q[0] : q0, part, r == 0 ? acc[0] : part_out);
        if (r == 0 && pk == 101) s.late_part = c;
        if (r == 1 && pk == 77) s.partial = twice_77 ? b.compute_fwd(q0, part, part_out) : c;
      }
  const BufferId back = b.transfer(Stream::Out, part_out, 0).dst;
  s.merge = b.merge(Stream::Out, back, acc[0]);
  const BufferId kv0 = b.transfer(Stream::Kv, kv[0], 1).dst;
  b.compute_fwd(q[1], kv0, acc[1]);
  b.compute_fwd(q[1], kv[1], acc[1]);
  s.plan = std::move(b).finish();
  return s;
}
}  // namespace

TEST(ValidatorRegions, FragmentedCellsAreCheckedAsStrictly) {
  EXPECT_EQ(first_rule(scattered().plan), "ok") << check(scattered().plan).summary(scattered().plan);
  {
    Scattered s = scattered();
    (void)duplicate(s.plan, s.late_part);
    EXPECT_EQ(first_rule(s.plan), "coverage");
    EXPECT_NE(first_message(s.plan).find("pair (Q0p0, KV0p101) of buffer 2 (out0) owner 0 part 0 is computed twice"),
              std::string::npos)
        << first_message(s.plan);
  }
  {
    Scattered s = scattered();
    erase(s.plan, s.late_part);
    EXPECT_EQ(first_rule(s.plan), "coverage");
    EXPECT_NE(first_message(s.plan).find("rank 0: final output part 0: missing kv blocks {0p101}"), std::string::npos)
        << first_message(s.plan);
  }
  {
    // Rank 1 computes owner 1's part 77 twice into the partial it sends back.
    const Scattered s = scattered(/*twice_77=*/true);
    const auto rep = check(s.plan);
    ASSERT_FALSE(rep.ok());
    EXPECT_EQ(rep.violations.front().rule, "coverage");
    EXPECT_NE(
        rep.violations.front().message.find("pair (Q0p0, KV1p77) of buffer 7 (out0) owner 0 part 0 is computed twice"),
        std::string::npos)
        << rep.summary(s.plan);
    EXPECT_EQ(rep.violations.front().ops, std::vector<OpId>{s.partial});
  }
  {
    Scattered s = scattered();
    (void)duplicate(s.plan, s.merge);
    EXPECT_EQ(first_rule(s.plan), "coverage");
    EXPECT_NE(first_message(s.plan).find(
                  "combines pairs already present: {1p0..1p127} of buffer 2 (out0) owner 0 part 0 counted twice"),
              std::string::npos)
        << first_message(s.plan);
  }
}
