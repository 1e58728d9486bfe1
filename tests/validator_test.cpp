// The validator rejects deliberately broken plans and names the rule.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <type_traits>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/interval_set.hpp"
#include "scheduler/validate/validator.hpp"

using namespace charm;
using namespace charm::ir;

namespace {
Plan make(const std::string& algo, int n, PassKind pass = PassKind::Fwd, bool causal = false) {
  sched::PlanRequest req;
  req.algo = algo;
  req.ranks = n;
  req.workload.seq = 256;
  req.workload.causal = causal;
  req.workload.pass = pass;
  auto p = sched::make_plan(req);
  EXPECT_TRUE(p.ok());
  return std::move(p).value();
}
OpId find(const Plan& p, auto pred) {
  for (OpId id = 0; id < OpId(p.size()); ++id)
    if (pred(p.op(id))) return id;
  ADD_FAILURE() << "no such op";
  return 0;
}
std::string first_rule(const Plan& p) {
  auto rep = sched::validate(p);
  return rep.ok() ? "ok" : rep.violations.front().rule;
}
bool names_op(const Plan& p, OpId id) {
  auto rep = sched::validate(p);
  if (rep.ok()) return false;
  const auto& ops = rep.violations.front().ops;
  return std::find(ops.begin(), ops.end(), id) != ops.end();
}
}  // namespace

TEST(Validator, AcceptsTheUnbrokenPlans) {
  for (const auto& a : {"ring", "merge", "rm+", "charm"}) EXPECT_EQ(first_rule(make(a, 8, PassKind::Both)), "ok") << a;
}

// A ValidatedPlan comes from sched::validated alone: a plan that breaks a rule gets its first violation back,
// and nothing else can wrap a plan as proved.
static_assert(!std::is_constructible_v<ValidatedPlan, Plan>, "only sched::validated makes a ValidatedPlan");
static_assert(!std::is_default_constructible_v<ValidatedPlan>, "only sched::validated makes a ValidatedPlan");

TEST(Validator, ValidatedKeepsTheProvedPlanAndRefusesABrokenOne) {
  const Plan p = make("charm", 8, PassKind::Both);
  const auto valid = sched::validated(p);
  ASSERT_TRUE(valid.ok()) << valid.error().message();
  EXPECT_EQ((*valid)->size(), p.size());
  Plan broken = p;
  broken.erase_ops(std::vector<OpId>{find(broken, [](const Op& o) { return o.kind == OpKind::Send; })});
  const auto refused = sched::validated(broken);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message(), sched::validate(broken).summary(broken));
}

TEST(Validator, RejectsARemovedSend) {
  Plan p = make("rm+", 8);
  const OpId send = find(p, [](const Op& o) { return o.kind == OpKind::Send && o.rank == 2; });
  const Op removed = p.op(send);
  p.erase_ops(std::vector<OpId>{send});
  EXPECT_EQ(first_rule(p), "matching");
  const auto rep = sched::validate(p);
  EXPECT_NE(rep.summary(p).find("has no matching send on rank 2"), std::string::npos) << rep.summary(p);
  EXPECT_EQ(p.op(rep.violations.front().ops.front()).peer, removed.rank);
}

TEST(Validator, RejectsADuplicatedCompute) {
  Plan p = make("charm", 8, PassKind::Fwd);
  // A compute into the rank's own accumulator (only the compute stream touches
  // it) on buffers whose storage no later buffer takes over, so that the
  // duplicate (appended last) breaks coverage only, not buffer lifetimes.
  std::vector<char> reused(p.buffers().size(), 0);
  for (const Buffer& b : p.buffers())
    if (b.reuse != kNone) reused[std::size_t(b.reuse)] = 1;
  const OpId c = find(p, [&](const Op& o) {
    return o.kind == OpKind::Compute && o.rank == 5 && o.q_owner != o.kv_owner && o.buf[2] == p.results()[5].out &&
           !reused[std::size_t(o.buf[0])] && !reused[std::size_t(o.buf[1])];
  });
  const Op dup = p.op(c);
  std::vector<OpId> deps(p.deps(c).begin(), p.deps(c).end());
  const OpId copy = p.add_op(dup, deps);
  EXPECT_EQ(first_rule(p), "coverage");
  EXPECT_TRUE(names_op(p, copy));
  EXPECT_NE(sched::validate(p).summary(p).find("computed twice"), std::string::npos);
}

TEST(Validator, RejectsAComputeThatDoesNotWaitForItsData) {
  // Ring: the compute of step 1 reads the KV block that the step-1 receive writes.
  Plan p = make("ring", 4);
  const OpId c = find(p, [](const Op& o) { return o.kind == OpKind::Compute && o.rank == 1 && o.kv_owner == 0; });
  const OpId recv = find(p, [&](const Op& o) { return o.kind == OpKind::Recv && o.buf[0] == p.op(c).buf[1]; });
  ASSERT_FALSE(p.deps(c).empty());
  p.set_deps(c, {});
  EXPECT_EQ(first_rule(p), "lifetime");
  EXPECT_TRUE(names_op(p, c));
  EXPECT_TRUE(names_op(p, recv));
}

TEST(Validator, RejectsSwappedReceivesThatDeadlock) {
  // Merge with every message issued on its own (no ncclGroup): a rank sends
  // then receives, its partner receives then sends. Swapping rank 0's receives
  // of levels 1 and 2 makes rank 0 wait on rank 2 while rank 2 waits on rank 0.
  Plan p = make("merge", 4);
  for (OpId id = 0; id < OpId(p.size()); ++id) p.op(id).group = kNone;
  ASSERT_EQ(first_rule(p), "ok");
  const OpId r1 = find(p, [](const Op& o) { return o.kind == OpKind::Recv && o.rank == 0 && o.peer == 1; });
  const OpId r2 = find(p, [](const Op& o) { return o.kind == OpKind::Recv && o.rank == 0 && o.peer == 2; });
  std::vector<OpId> d1(p.deps(r1).begin(), p.deps(r1).end()), d2(p.deps(r2).begin(), p.deps(r2).end());
  std::swap(p.op(r1), p.op(r2));
  p.set_deps(r1, d2);
  p.set_deps(r2, d1);
  EXPECT_EQ(first_rule(p), "deadlock");
  EXPECT_NE(sched::validate(p).summary(p).find("NCCL"), std::string::npos);
}

TEST(Validator, RejectsACycle) {
  Plan p = make("ring", 2);
  const OpId a = find(p, [](const Op& o) { return o.kind == OpKind::Compute && o.rank == 0; });
  OpId b = a;
  for (OpId id = a + 1; id < OpId(p.size()); ++id)
    if (p.op(id).rank == 0 && p.op(id).kind == OpKind::Compute) {
      b = id;
      break;
    }
  ASSERT_NE(a, b);
  p.set_deps(a, std::vector<OpId>{b});  // first compute waits for the second: with stream order, a cycle
  EXPECT_EQ(first_rule(p), "acyclic");
  EXPECT_TRUE(names_op(p, a));
}

TEST(Validator, RejectsAMissingContribution) {
  Plan p = make("merge", 8, PassKind::Bwd);
  const OpId acc = find(p, [](const Op& o) { return o.kind == OpKind::Accumulate && o.rank == 6; });
  p.erase_ops(std::vector<OpId>{acc});
  const auto rep = sched::validate(p);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.violations.front().rule, "coverage");
  EXPECT_NE(rep.summary(p).find("final dK/dV missing"), std::string::npos) << rep.summary(p);
}

TEST(Validator, RejectsMismatchedBytes) {
  Plan p = make("ring", 4);
  const OpId s = find(p, [](const Op& o) { return o.kind == OpKind::Send; });
  p.op(s).bytes += 2;
  EXPECT_EQ(first_rule(p), "matching");
}

TEST(Validator, RejectsCrossRankDependencies) {
  Plan p = make("ring", 4);
  const OpId a = find(p, [](const Op& o) { return o.kind == OpKind::Compute && o.rank == 0; });
  const OpId b = find(p, [](const Op& o) { return o.kind == OpKind::Compute && o.rank == 1; });
  p.set_deps(b, std::vector<OpId>{a});
  EXPECT_EQ(first_rule(p), "structure");
}

TEST(IntervalSet, MergeMatchesASetOfInts) {
  // merge() has in-place paths (one set wholly before or after the other) and a general one.
  std::uint32_t seed = 12345;
  auto rnd = [&](int n) {
    seed = seed * 1664525u + 1013904223u;
    return int((seed >> 8) % std::uint32_t(n));
  };
  for (int round = 0; round < 2000; ++round) {
    sched::IntervalSet a, b;
    std::set<int> sa, sb;
    const int lo_a = rnd(40), lo_b = rnd(40), span = 1 + rnd(30);
    for (int k = rnd(12); k > 0; --k) {
      const int x = lo_a + rnd(span);
      (void)a.insert(x);
      sa.insert(x);
    }
    for (int k = rnd(12); k > 0; --k) {
      const int x = lo_b + rnd(span);
      (void)b.insert(x);
      sb.insert(x);
    }
    const auto overlap = a.merge(b);
    std::set<int> want = sa, both;
    for (int x : sb) (want.count(x) ? both : want).insert(x);
    sched::IntervalSet w, o;
    for (int x : want) (void)w.insert(x);
    for (int x : both) (void)o.insert(x);
    ASSERT_TRUE(a == w) << round << ": " << a.str() << " vs " << w.str();
    ASSERT_TRUE(overlap == o) << round << ": " << overlap.str() << " vs " << o.str();
  }
}

namespace {
/// A ring plan with its buffers' storage reuse rewritten by `edit` (through JSON).
Plan with_reuse_edit(PassKind pass, const std::function<void(nlohmann::json&)>& edit) {
  auto j = plan_to_json(make("ring", 4, pass));
  edit(j["buffers"]);
  auto p = plan_from_json(j, "edited");
  EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message());
  return std::move(p).value();
}
/// The first buffer that reuses another.
std::size_t first_reuser(const nlohmann::json& bufs) {
  for (std::size_t b = 0; b < bufs.size(); ++b)
    if (bufs[b].contains("reuse")) return b;
  ADD_FAILURE() << "the ring plan reuses no buffer";
  return 0;
}
}  // namespace

TEST(Validator, RingPlansReuseBufferStorage) {
  // Double buffering: a 4-rank ring forward receives 3 KV blocks per rank into 2 slots.
  const Plan p = make("ring", 4);
  int reusers = 0;
  for (const Buffer& b : p.buffers()) reusers += b.reuse != kNone;
  EXPECT_EQ(reusers, 4);  // the third block of each rank
  EXPECT_TRUE(sched::validate(p).ok());
}

TEST(Validator, RejectsReusingAnInput) {
  Plan p = with_reuse_edit(PassKind::Fwd, [](nlohmann::json& bufs) {
    const std::size_t b = first_reuser(bufs);
    for (std::size_t a = 0; a < b; ++a)
      if (bufs[a]["init"] == "input" && bufs[a]["rank"] == bufs[b]["rank"] && bufs[a]["kind"] == bufs[b]["kind"]) {
        bufs[b]["reuse"] = a;
        return;
      }
    ADD_FAILURE() << "no input to reuse";
  });
  EXPECT_EQ(first_rule(p), "structure");
  EXPECT_NE(sched::validate(p).summary(p).find("an input"), std::string::npos) << sched::validate(p).summary(p);
}

namespace {
/// CHARM+ backward on 8 ranks in 2 domains: its dQ and dK/dV partials that come
/// home share one slot, so some chain passes from a dK/dV buffer to a dQ one and back.
Plan charm_backward_8x2() {
  sched::PlanRequest req;
  req.algo = "charm";
  req.ranks = 8;
  req.domains = 2;
  req.workload.seq = 256;
  req.workload.pass = PassKind::Bwd;
  auto p = sched::make_plan(req);
  EXPECT_TRUE(p.ok());
  return std::move(p).value();
}
/// A buffer of `kind` that reuses a buffer of `from`.
BufferId reuser_of(const Plan& p, BufKind kind, BufKind from) {
  for (BufferId b = 0; b < BufferId(p.buffers().size()); ++b)
    if (p.buffer(b).reuse != kNone && p.buffer(b).kind == kind && p.buffer(p.buffer(b).reuse).kind == from) return b;
  return kNone;
}
}  // namespace

TEST(Validator, AChainMayHoldSmallerBuffersOfItsStorage) {
  // The storage is the chain's first buffer: a dK/dV slot takes a dQ partial and
  // then a dK/dV one again.
  const Plan p = charm_backward_8x2();
  const BufferId big_after_small = reuser_of(p, BufKind::Dkv, BufKind::Dq);
  ASSERT_NE(big_after_small, kNone);
  EXPECT_EQ(p.buffer(p.storage(big_after_small)).kind, BufKind::Dkv);
  EXPECT_EQ(first_rule(p), "ok");
}

TEST(Validator, RejectsABufferLargerThanItsStorage) {
  // A dK/dV partial that takes over a dQ partial's storage: held in fp32 instead of the activations' dtype, it
  // needs twice the storage of the chain it joins.
  auto j = plan_to_json(charm_backward_8x2());
  const Plan whole = charm_backward_8x2();
  const BufferId big = reuser_of(whole, BufKind::Dkv, BufKind::Dq);
  ASSERT_NE(big, kNone);
  ASSERT_TRUE(whole.buffer(big).activations_dtype);
  auto& jb = j["buffers"][std::size_t(big)];
  jb.erase("activations_dtype");
  jb["bytes"] = 2 * whole.buffer(big).bytes;
  auto p = plan_from_json(j, "edited");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(first_rule(*p), "structure");
  EXPECT_NE(sched::validate(*p).summary(*p).find("in a storage smaller"), std::string::npos)
      << sched::validate(*p).summary(*p);
}

TEST(Validator, HoldsOnlyGradientsInTheActivationsDtype) {
  // Gradient buffers are fp32 unless marked; a mark on any other kind, or bytes that ignore it, is refused.
  const Plan whole = charm_backward_8x2();
  BufferId q = kNone, partial = kNone;
  for (BufferId b = 0; b < BufferId(whole.buffers().size()); ++b) {
    if (q == kNone && whole.buffer(b).kind == BufKind::QBundle) q = b;
    if (partial == kNone && whole.buffer(b).activations_dtype) partial = b;
  }
  ASSERT_NE(q, kNone);
  ASSERT_NE(partial, kNone);
  auto marked = plan_to_json(whole);
  marked["buffers"][std::size_t(q)]["activations_dtype"] = true;
  auto p = plan_from_json(marked, "edited");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(first_rule(*p), "structure");
  EXPECT_NE(sched::validate(*p).summary(*p).find("held in the activations' dtype"), std::string::npos)
      << sched::validate(*p).summary(*p);
  auto unmarked = plan_to_json(whole);
  unmarked["buffers"][std::size_t(partial)].erase("activations_dtype");
  p = plan_from_json(unmarked, "edited");
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_NE(sched::validate(*p).summary(*p).find("but its region needs"), std::string::npos)
      << sched::validate(*p).summary(*p);
}

TEST(Validator, RejectsReusingAStillLiveBuffer) {
  // The third KV block of a rank takes over the slot of the second instead of
  // the first: the second is still computed on and sent while the third arrives.
  Plan p = with_reuse_edit(PassKind::Fwd, [](nlohmann::json& bufs) {
    const std::size_t b = first_reuser(bufs);
    for (std::size_t a = b; a-- > 0;)
      if (bufs[a]["rank"] == bufs[b]["rank"] && bufs[a]["kind"] == "kv" && bufs[a]["init"] != "input") {
        bufs[b]["reuse"] = a;
        return;
      }
  });
  EXPECT_EQ(first_rule(p), "lifetime");
  EXPECT_NE(sched::validate(p).summary(p).find("into the storage of"), std::string::npos)
      << sched::validate(p).summary(p);
}
