// The validator on region plans (owner ranges, kv-head ranges, token parts, views):
// hand-built Ulysses- and TASP-style plans validate clean, and each broken on
// purpose is rejected by the rule that owns the defect.
#include <gtest/gtest.h>

#include <array>
#include <nlohmann/json.hpp>
#include <vector>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/plan_builder.hpp"
#include "scheduler/validate/validator.hpp"
#include "validator_region_test_support.hpp"

using namespace charm;
using namespace charm::ir;
using sched::PlanBuilder;
using namespace charm::ir::test_support;

namespace {

/// What a hand-built plan's tests break.
struct Built {
  Plan plan;
  std::vector<OpId> computes;    // per rank (Ulysses), or every compute (TASP)
  std::vector<OpId> placements;  // Ulysses: the copies of head slices into the final outputs
};

/// Ulysses-style forward on n ranks (n divides the 4 kv heads): rank j gathers
/// kv heads [j*hs, (j+1)*hs) of every owner into one buffer (its own slice by a
/// copy into a view, the others by receives into views, one ncclGroup per rank),
/// computes once over all owners, and sends each owner's rows back, where head
/// slices are placed into the whole output. With `hole`, rank 0's own Q slice is
/// placed one kv head at a time and the second head is left out.
Built ulysses(int n, bool causal, bool hole = false) {
  PlanBuilder b("hand-ulysses", workload(causal), n, 1);
  const int hs = 4 / n;
  const auto N = std::size_t(n);
  auto heads_of = [&](int j) { return Region{0, n, j * hs, (j + 1) * hs, 0, 1}; };
  std::vector<BufferId> q(N), kv(N);
  for (int r = 0; r < n; ++r) {
    q[std::size_t(r)] = b.buffer(r, BufKind::Q, r, BufInit::Input);
    kv[std::size_t(r)] = b.buffer(r, BufKind::Kv, r, BufInit::Input);
  }
  auto gather = [&](Stream s, const std::vector<BufferId>& whole) {
    std::vector<BufferId> g(N);
    std::vector<int> group(N);
    for (int r = 0; r < n; ++r) {
      g[std::size_t(r)] = b.buffer(r, b.buf(whole[0]).kind, heads_of(r), BufInit::None);
      group[std::size_t(r)] = b.new_group();
    }
    std::vector<std::vector<BufferId>> slice(N, std::vector<BufferId>(N, kNone));
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < n; ++j) {
        Region part = heads_of(j);
        part.owner_begin = r;
        part.owner_end = r + 1;
        if (j != r) {
          slice[std::size_t(r)][std::size_t(j)] = b.buffer(r, b.buf(whole[0]).kind, part, BufInit::None);
          b.copy(s, whole[std::size_t(r)], slice[std::size_t(r)][std::size_t(j)]);
        } else if (hole && r == 0 && s == Stream::Q) {
          part.head_end = part.head_begin + 1;  // one kv head only: the second is never placed
          const BufferId one = b.buffer(r, BufKind::Q, part, BufInit::None);
          b.copy(s, whole[std::size_t(r)], one);
          b.copy(s, one, b.view(g[std::size_t(r)], r));
        } else {
          b.copy(s, whole[std::size_t(r)], b.view(g[std::size_t(r)], r));
        }
      }
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < n; ++j)
        if (j != r)
          b.transfer(s, slice[std::size_t(r)][std::size_t(j)], j, group[std::size_t(r)], group[std::size_t(j)], {}, {},
                     b.view(g[std::size_t(j)], r));
    return g;
  };
  const auto gq = gather(Stream::Q, q), gkv = gather(Stream::Kv, kv);
  Built out;
  std::vector<BufferId> go(N), whole(N);
  for (int r = 0; r < n; ++r) {
    go[std::size_t(r)] = b.buffer(r, BufKind::Out, heads_of(r), BufInit::Zero);
    out.computes.push_back(b.compute_fwd(gq[std::size_t(r)], gkv[std::size_t(r)], go[std::size_t(r)]));
    whole[std::size_t(r)] = b.buffer(r, BufKind::Out, r, BufInit::None);
    b.results(r).out = whole[std::size_t(r)];
  }
  std::vector<int> group(N);
  for (auto& g : group) g = b.new_group();
  std::vector<std::vector<BufferId>> rows(N, std::vector<BufferId>(N, kNone));  // rows[dst][src]
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < n; ++j) {
      const BufferId v = b.view(go[std::size_t(r)], j);
      rows[std::size_t(j)][std::size_t(r)] =
          j == r ? v : b.transfer(Stream::Out, v, j, group[std::size_t(r)], group[std::size_t(j)]).dst;
    }
  for (int j = 0; j < n; ++j)
    for (int r = 0; r < n; ++r)
      out.placements.push_back(b.copy(Stream::Out, rows[std::size_t(j)][std::size_t(r)], whole[std::size_t(j)]));
  out.plan = std::move(b).finish();
  return out;
}

/// TASP-style forward on n ranks with 2 token parts: step 0 computes the local
/// pair whole; then each KV part travels the ring r -> r+1 on its own, both parts
/// of a step in one ncclGroup, and every part is computed where it lands.
Built tasp(int n, bool causal) {
  PlanBuilder b("hand-tasp", workload(causal), n, 1);
  b.set_parts(2);
  const auto N = std::size_t(n);
  std::vector<BufferId> q(N), acc(N);
  std::vector<std::array<BufferId, 2>> cur(N);
  Built out;
  for (int r = 0; r < n; ++r) {
    q[std::size_t(r)] = b.buffer(r, BufKind::Q, r, BufInit::Input);
    const BufferId kv = b.buffer(r, BufKind::Kv, r, BufInit::Input);
    acc[std::size_t(r)] = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    b.results(r).out = acc[std::size_t(r)];
    for (int c = 0; c < 2; ++c) {
      cur[std::size_t(r)][std::size_t(c)] = b.buffer(r, BufKind::Kv, Region{r, r + 1, 0, 4, c, c + 1}, BufInit::None);
      b.copy(Stream::Kv, kv, cur[std::size_t(r)][std::size_t(c)]);
    }
    if (b.any_visible(q[std::size_t(r)], kv))
      out.computes.push_back(b.compute_fwd(q[std::size_t(r)], kv, acc[std::size_t(r)]));
  }
  for (int step = 1; step < n; ++step) {
    std::vector<std::array<BufferId, 2>> next(N);
    std::vector<int> group(N);
    for (auto& g : group) g = b.new_group();
    for (int c = 0; c < 2; ++c)
      for (int r = 0; r < n; ++r) {
        const int dst = (r + 1) % n;
        next[std::size_t(dst)][std::size_t(c)] = b.transfer(Stream::Kv, cur[std::size_t(r)][std::size_t(c)], dst,
                                                            group[std::size_t(r)], group[std::size_t(dst)])
                                                     .dst;
      }
    cur = next;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < 2; ++c)
        if (b.any_visible(q[std::size_t(r)], cur[std::size_t(r)][std::size_t(c)]))
          out.computes.push_back(
              b.compute_fwd(q[std::size_t(r)], cur[std::size_t(r)][std::size_t(c)], acc[std::size_t(r)]));
  }
  out.plan = std::move(b).finish();
  return out;
}

/// The plan with `edit` applied to its JSON form (to break buffers, which a Plan keeps const).
Plan edited(const Plan& p, auto edit) {
  auto j = plan_to_json(p);
  edit(j);
  auto back = plan_from_json(j, "test");
  EXPECT_TRUE(back.ok()) << back.error().message();
  return std::move(back).value();
}
/// The first buffer that is a view (JSON index).
std::size_t first_view(const nlohmann::json& j) {
  for (std::size_t i = 0; i < j["buffers"].size(); ++i)
    if (j["buffers"][i].contains("parent")) return i;
  ADD_FAILURE() << "no view";
  return 0;
}

}  // namespace

TEST(ValidatorRegions, AcceptsHandBuiltUlyssesAndTasp) {
  for (bool causal : {false, true}) {
    for (int n : {2, 4}) {
      const Plan p = ulysses(n, causal).plan;
      EXPECT_TRUE(p.has_regions());
      EXPECT_EQ(first_rule(p), "ok") << "ulysses n=" << n << " causal=" << causal << ": " << check(p).summary(p);
    }
    for (int n : {2, 3, 4}) {
      const Plan p = tasp(n, causal).plan;
      EXPECT_EQ(first_rule(p), "ok") << "tasp n=" << n << " causal=" << causal << ": " << check(p).summary(p);
    }
  }
}

TEST(ValidatorRegions, ReceivesIntoViewsOfOneBufferInOneGroupDoNotConflict) {
  // Rank 0 of a 4-rank Ulysses receives three owners' Q slices into three views
  // of one gathered buffer, as one ncclGroup: disjoint owners, no lifetime conflict.
  const Plan p = ulysses(4, false).plan;
  std::vector<OpId> recvs;
  for (OpId id = 0; id < OpId(p.size()); ++id)
    if (p.op(id).kind == OpKind::Recv && p.op(id).rank == 0 && p.op(id).stream == Stream::Q) recvs.push_back(id);
  ASSERT_EQ(recvs.size(), 3u);
  for (OpId r : recvs) {
    EXPECT_EQ(p.op(r).group, p.op(recvs[0]).group);
    EXPECT_EQ(p.root(p.op(r).buf[0]), p.root(p.op(recvs[0]).buf[0]));
  }
  EXPECT_EQ(first_rule(p), "ok");
}

TEST(ValidatorRegions, RejectsADroppedReceiveIntoAView) {
  Plan p = ulysses(4, true).plan;
  const OpId recv = find(
      p, [](const Op& o) { return o.kind == OpKind::Recv && o.rank == 2 && o.peer == 1 && o.stream == Stream::Kv; });
  p.erase_ops(std::vector<OpId>{recv});
  EXPECT_EQ(first_rule(p), "matching");
  // With its send gone as well, owner 1's slice of rank 2's gathered KV is never written.
  Plan q = ulysses(4, true).plan;
  const OpId r2 = find(
      q, [](const Op& o) { return o.kind == OpKind::Recv && o.rank == 2 && o.peer == 1 && o.stream == Stream::Kv; });
  const OpId s2 = find(
      q, [](const Op& o) { return o.kind == OpKind::Send && o.rank == 1 && o.peer == 2 && o.stream == Stream::Kv; });
  q.erase_ops(std::vector<OpId>{r2, s2});
  EXPECT_EQ(first_rule(q), "lifetime");
  EXPECT_NE(first_message(q).find("owner 1 that nothing writes"), std::string::npos) << first_message(q);
}

TEST(ValidatorRegions, RejectsAHeadNothingWrote) {
  // Owner 0's slice of rank 0's gathered Q is written (lifetime is satisfied,
  // owner by owner), but only its first kv head: the compute reads the second.
  const Plan p = ulysses(2, false, /*hole=*/true).plan;
  EXPECT_EQ(first_rule(p), "coverage");
  EXPECT_NE(first_message(p).find("owner 0 head 1, which nothing wrote"), std::string::npos) << first_message(p);
}

TEST(ValidatorRegions, RejectsADroppedHeadSlicePlacement) {
  Built u = ulysses(2, true);
  // Rank 1's placement of rank 0's slice (kv heads 0-1) into its final output.
  OpId drop = kNone;
  for (OpId c : u.placements)
    if (u.plan.op(c).rank == 1 && u.plan.region(u.plan.op(c).buf[0]).head_begin == 0) drop = c;
  ASSERT_NE(drop, kNone);
  erase(u.plan, drop);
  const auto rep = check(u.plan);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.violations.front().rule, "coverage");
  EXPECT_NE(rep.summary(u.plan).find("rank 1: final output head 0 is never written: missing kv blocks {0..1}"),
            std::string::npos)
      << rep.summary(u.plan);
}

TEST(ValidatorRegions, RejectsADuplicatedCompute) {
  Built u = ulysses(2, false);
  const OpId copy = duplicate(u.plan, u.computes[1]);
  auto rep = check(u.plan);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.violations.front().rule, "coverage");
  EXPECT_NE(rep.violations.front().message.find("computed twice"), std::string::npos) << rep.summary(u.plan);
  EXPECT_EQ(rep.violations.front().ops, std::vector<OpId>{copy});

  Built t = tasp(3, true);
  OpId part = kNone;  // a compute of one KV part
  for (OpId c : t.computes)
    if (t.plan.buffer(t.plan.op(c).buf[1]).parts == 1) part = c;
  ASSERT_NE(part, kNone);
  (void)duplicate(t.plan, part);
  EXPECT_EQ(first_rule(t.plan), "coverage");
  EXPECT_NE(first_message(t.plan).find("computed twice"), std::string::npos) << first_message(t.plan);
  EXPECT_NE(first_message(t.plan).find("part"), std::string::npos) << first_message(t.plan);
}

TEST(ValidatorRegions, RejectsADroppedPartCompute) {
  Built t = tasp(2, false);
  OpId part = kNone;
  for (OpId c : t.computes)
    if (t.plan.op(c).rank == 1 && t.plan.buffer(t.plan.op(c).buf[1]).parts == 1 &&
        t.plan.buffer(t.plan.op(c).buf[1]).part_begin == 1)
      part = c;
  ASSERT_NE(part, kNone);
  erase(t.plan, part);
  EXPECT_EQ(first_rule(t.plan), "coverage");
  // Rank 1 misses part 1 of owner 0's KV, for both its query parts.
  EXPECT_NE(first_message(t.plan).find("rank 1: final output part 0: missing kv blocks {0p1}"), std::string::npos)
      << first_message(t.plan);
}

TEST(ValidatorRegions, RejectsAComputeOfInvisibleParts) {
  // Causal, 2 ranks, 2 parts: rank 0's queries see nothing of owner 1's KV. A
  // compute of one of its parts passes the structure rules (its mask piece is
  // the pair's) but computes nothing.
  PlanBuilder b("hand", workload(true), 2, 1);
  b.set_parts(2);
  const BufferId q = b.buffer(0, BufKind::Q, 0, BufInit::Input), kv0 = b.buffer(0, BufKind::Kv, 0, BufInit::Input);
  const BufferId kv1 = b.buffer(1, BufKind::Kv, 1, BufInit::Input), acc = b.buffer(0, BufKind::Out, 0, BufInit::Zero);
  b.results(0).out = acc;
  b.results(1).out = b.buffer(1, BufKind::Out, 1, BufInit::Zero);
  b.compute_fwd(q, kv0, acc);
  const BufferId part = b.buffer(1, BufKind::Kv, Region{1, 2, 0, 4, 0, 1}, BufInit::None);
  b.copy(Stream::Kv, kv1, part);
  const OpId wasted = b.compute_fwd(q, b.transfer(Stream::Kv, part, 0).dst, acc);
  const Plan p = std::move(b).finish();
  const auto rep = check(p);
  ASSERT_FALSE(rep.ok());
  EXPECT_EQ(rep.violations.front().rule, "coverage");
  EXPECT_NE(rep.violations.front().message.find("computes no pair the mask leaves visible"), std::string::npos)
      << rep.summary(p);
  EXPECT_EQ(rep.violations.front().ops, std::vector<OpId>{wasted});
}

TEST(ValidatorRegions, RejectsAViewWithOtherHeads) {
  const Plan p = edited(ulysses(2, false).plan, [](nlohmann::json& j) {
    auto& v = j["buffers"][first_view(j)];
    v["head_begin"] = v["head_begin"].get<int>() == 0 ? 2 : 0;
  });
  EXPECT_EQ(first_rule(p), "structure");
  EXPECT_NE(first_message(p).find("is a view of"), std::string::npos) << first_message(p);
}

TEST(ValidatorRegions, RejectsRegionsOutsideTheWorkload) {
  const Plan base = ulysses(2, false).plan;
  for (const auto& fv : {std::pair{"heads", 9}, std::pair{"part_begin", 1}}) {
    const Plan p = edited(base, [&](nlohmann::json& j) {
      for (auto& b : j["buffers"])
        if (b.contains("heads") && !b.contains("parent")) {
          b[fv.first] = fv.second;
          break;
        }
    });
    EXPECT_EQ(first_rule(p), "structure") << fv.first;
    EXPECT_NE(first_message(p).find("outside the workload"), std::string::npos) << first_message(p);
  }
  const Plan parts = edited(base, [](nlohmann::json& j) { j["parts"] = 5; });  // 384 tokens per shard
  EXPECT_EQ(first_rule(parts), "structure");
  EXPECT_NE(first_message(parts).find("token parts"), std::string::npos) << first_message(parts);
}

TEST(ValidatorRegions, RejectsBytesThatDoNotMatchTheRegion) {
  const Plan p = edited(ulysses(2, false).plan, [](nlohmann::json& j) {
    for (auto& b : j["buffers"])
      if (b.contains("heads")) {
        b["bytes"] = b["bytes"].get<std::uint64_t>() * 2;
        break;
      }
  });
  EXPECT_EQ(first_rule(p), "structure");
  EXPECT_NE(first_message(p).find("its region needs"), std::string::npos) << first_message(p);
}

TEST(ValidatorRegions, RejectsInputsAndResultsThatAreNotWholeShards) {
  const Plan in = edited(ulysses(2, false).plan, [](nlohmann::json& j) {
    auto& b = j["buffers"][0];  // rank 0's Q input
    ASSERT_EQ(b["init"], "input");
    b["heads"] = 2;
    b["bytes"] = b["bytes"].get<std::uint64_t>() / 2;
  });
  EXPECT_EQ(first_rule(in), "structure");
  EXPECT_NE(first_message(in).find("an input must be the whole shard"), std::string::npos) << first_message(in);
  Built u = ulysses(2, false);
  u.plan.results()[0].out = u.plan.op(u.computes[0]).buf[2];  // the gathered head slice
  EXPECT_EQ(first_rule(u.plan), "structure");
}

TEST(ValidatorRegions, RejectsAComputeOverMismatchedRegions) {
  Built u = ulysses(2, false);
  Op& c = u.plan.op(u.computes[0]);
  c.mask = MaskPiece::Full;  // a compute over several owners is Mixed
  EXPECT_EQ(first_rule(u.plan), "structure");
  EXPECT_NE(first_message(u.plan).find("mask piece full but the workload gives mixed"), std::string::npos)
      << first_message(u.plan);
  // Rank 0's compute against a KV slice of other kv heads (the slice it sends to rank 1).
  Built v = ulysses(2, false);
  const OpId slicing = find(v.plan, [&](const Op& o) {
    return o.kind == OpKind::Copy && o.rank == 0 && o.stream == Stream::Kv && v.plan.buffer(o.buf[1]).parent == kNone;
  });
  v.plan.op(v.computes[0]).buf[1] = v.plan.op(slicing).buf[1];
  EXPECT_EQ(first_rule(v.plan), "structure");
  EXPECT_NE(first_message(v.plan).find("cover different kv heads"), std::string::npos) << first_message(v.plan);
  // Rank 0's compute into its whole output instead of the gathered head slice.
  Built w = ulysses(2, false);
  w.plan.op(w.computes[0]).buf[2] = w.plan.results()[0].out;
  EXPECT_EQ(first_rule(w.plan), "structure");
  EXPECT_NE(first_message(w.plan).find("accumulates into a buffer of another region"), std::string::npos)
      << first_message(w.plan);
}

TEST(ValidatorRegions, RejectsASendIntoARecvOfAnotherRegion) {
  Plan p = ulysses(4, false).plan;
  // Rank 0 receives owners 1, 2, 3 into views of one buffer: swap two receives'
  // destinations (same kind, same bytes, other owner).
  std::vector<OpId> recvs;
  for (OpId id = 0; id < OpId(p.size()); ++id)
    if (p.op(id).kind == OpKind::Recv && p.op(id).rank == 0 && p.op(id).stream == Stream::Q) recvs.push_back(id);
  ASSERT_EQ(recvs.size(), 3u);
  std::swap(p.op(recvs[0]).buf[0], p.op(recvs[1]).buf[0]);
  EXPECT_EQ(first_rule(p), "matching");
  EXPECT_NE(first_message(p).find("sends q1h0 into q2h0"), std::string::npos) << first_message(p);
}

TEST(ValidatorRegions, RejectsAComputeThatDoesNotWaitForOneOwner) {
  // The compute over all owners waits for every receive into its gathered KV;
  // dropping its dependencies races with the receives (owner granularity).
  Built u = ulysses(2, false);
  u.plan.set_deps(u.computes[1], {});
  EXPECT_EQ(first_rule(u.plan), "lifetime");
  EXPECT_NE(first_message(u.plan).find(" owner "), std::string::npos) << first_message(u.plan);
}

TEST(ValidatorRegions, RejectsASendAndAReceiveOfOneBufferInOneGroup) {
  // Members of one ncclGroup may complete in any order: rank 0 sending K and
  // receiving into K in one group races (plain buffers: the rule is the same).
  PlanBuilder b("hand", workload(false), 2, 1);
  const BufferId kv0 = b.buffer(0, BufKind::Kv, 0, BufInit::Input);
  (void)b.buffer(1, BufKind::Kv, 1, BufInit::Input);
  const BufferId k = b.buffer(0, BufKind::Kv, 0, BufInit::None);
  b.copy(Stream::Kv, kv0, k);
  const BufferId b1 = b.transfer(Stream::Kv, kv0, 1).dst;
  const int g0 = b.new_group(), g1 = b.new_group();
  b.transfer(Stream::Kv, k, 1, g0, g1);
  const auto back = b.transfer(Stream::Kv, b1, 0, g1, g0, {}, {}, /*into=*/k);
  for (int r = 0; r < 2; ++r) b.results(r).out = b.buffer(r, BufKind::Out, r, BufInit::Zero);
  Plan p = std::move(b).finish();
  p.set_deps(back.recv, {});  // the builder orders the receive after the send: that deadlocks a group
  EXPECT_EQ(first_rule(p), "lifetime");
  EXPECT_NE(first_message(p).find("overwrites buffer"), std::string::npos) << first_message(p);
}
