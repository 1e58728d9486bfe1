// Hand-built Ulysses- and TASP-style region plans on the threads backend against the fp64 reference.
#include <gtest/gtest.h>

#include <optional>
#include <tuple>
#include <vector>

#include "runtime/check.hpp"
#include "runtime/executor.hpp"
#include "runtime/reference.hpp"
#include "runtime_region_test_support.hpp"
#include "scheduler/planners/plan_builder.hpp"

namespace charm::rt {
namespace {

using ir::BufferId;
using ir::BufInit;
using ir::BufKind;
using ir::Region;
using ir::Stream;
using test_support::Shape;
using test_support::workload_of;

// Ulysses: rank r computes kv heads [r*hr, (r+1)*hr) for every owner. Head slices of
// Q, KV (and the bundle) travel all-to-all into views of gathered buffers; the
// forward splits the kv owners in two computes and merges, the backward
// accumulates; results come back as views and are placed into whole shards.
// pack_on_heads: the bundle is packed on the gathered heads (else on whole shards).
/// The plan's builder and what its passes share: the query, kv and output shards, the gathered kv.
class UlyssesTestPlan {
 public:
  UlyssesTestPlan(const ir::Workload& workload, int ranks)
      : w(workload), n(ranks), hr(int(workload.kv_heads) / ranks), N(std::size_t(ranks)),
        b("ulysses-test", workload, ranks, 1), q(N), kv(N), out(N) {
    for (int r = 0; r < n; ++r) {
      q[std::size_t(r)] = b.buffer(r, BufKind::Q, r, BufInit::Input);
      kv[std::size_t(r)] = b.buffer(r, BufKind::Kv, r, BufInit::Input);
    }
  }

  ir::Plan build(bool pack_on_heads) {
    if (w.pass != ir::PassKind::Bwd) {
      const auto gq = forward();
      if (w.pass != ir::PassKind::Fwd && pack_on_heads) {
        backward_on_heads(gq);
        return std::move(b).finish();
      }
    }
    if (w.pass == ir::PassKind::Fwd) return std::move(b).finish();
    backward();
    return std::move(b).finish();
  }

 private:
  [[nodiscard]] Region heads_of(int r, int o0, int o1) const { return Region{o0, o1, r * hr, (r + 1) * hr, 0, 1}; }

  // Every rank's `src` (a whole shard, or any region holding its heads) all-to-all into
  // gathered[r] over (all owners, heads of r).
  std::vector<BufferId> all_to_all(Stream st, BufKind kind, const std::vector<BufferId>& src, BufInit init) {
    std::vector<BufferId> gathered(N);
    for (int r = 0; r < n; ++r) gathered[std::size_t(r)] = b.buffer(r, kind, heads_of(r, 0, n), init);
    std::vector<std::vector<BufferId>> slice(N, std::vector<BufferId>(N, ir::kNone));
    for (int s = 0; s < n; ++s)
      for (int r = 0; r < n; ++r) {
        if (r == s) {  // the own slice straight into place
          b.copy(Stream::Compute, src[std::size_t(s)], b.view(gathered[std::size_t(s)], s));
          continue;
        }
        slice[std::size_t(s)][std::size_t(r)] = b.buffer(s, kind, heads_of(r, s, s + 1), BufInit::None);
        b.copy(Stream::Compute, src[std::size_t(s)], slice[std::size_t(s)][std::size_t(r)]);
      }
    std::vector<int> g(N);
    for (auto& x : g) x = b.new_group();
    for (int s = 0; s < n; ++s)
      for (int r = 0; r < n; ++r)
        if (r != s)
          b.transfer(st, slice[std::size_t(s)][std::size_t(r)], r, g[std::size_t(s)], g[std::size_t(r)], {}, {},
                     b.view(gathered[std::size_t(r)], s));
    return gathered;
  }

  // Each owner's part of gathered[r] back to the owner, placed into whole[owner].
  /// Each rank's whole dQ and dK/dV (its results), assembled from the head slices' gradients.
  void gradients_home(const std::vector<BufferId>& gdq, const std::vector<BufferId>& gdkv) {
    std::vector<BufferId> dq(N), dkv(N);
    for (int r = 0; r < n; ++r) {
      dq[std::size_t(r)] = b.results(r).dq = b.buffer(r, BufKind::Dq, r, BufInit::None);
      dkv[std::size_t(r)] = b.results(r).dkv = b.buffer(r, BufKind::Dkv, r, BufInit::None);
    }
    scatter_back(Stream::Q, gdq, dq);
    scatter_back(Stream::Dkv, gdkv, dkv);
  }

  void scatter_back(Stream st, const std::vector<BufferId>& gathered, const std::vector<BufferId>& whole) {
    std::vector<int> g(N);
    for (auto& x : g) x = b.new_group();
    std::vector<std::pair<BufferId, BufferId>> place;
    for (int r = 0; r < n; ++r)
      for (int s = 0; s < n; ++s) {
        const BufferId v = b.view(gathered[std::size_t(r)], s);
        if (s == r)
          place.emplace_back(v, whole[std::size_t(s)]);
        else
          place.emplace_back(b.transfer(st, v, s, g[std::size_t(r)], g[std::size_t(s)]).dst, whole[std::size_t(s)]);
      }
    for (auto [from, to] : place) b.copy(Stream::Compute, from, to);
  }

  /// The forward: the gathered queries (kept for a backward packed on heads).
  std::vector<BufferId> forward() {
    b.set_phase(ir::Phase::Fwd);
    const auto gq = all_to_all(Stream::Q, BufKind::Q, q, BufInit::None);
    gkv = all_to_all(Stream::Kv, BufKind::Kv, kv, BufInit::None);
    gout.assign(N, ir::kNone);
    for (int r = 0; r < n; ++r) {
      const auto R = std::size_t(r);
      gout[R] = b.buffer(r, BufKind::Out, heads_of(r, 0, n), BufInit::Zero);
      const BufferId part = b.buffer(r, BufKind::Out, heads_of(r, 0, n), BufInit::Zero);
      const int half = n / 2;
      b.compute_fwd(gq[R], b.view(gkv[R], 0, half), part);
      b.compute_fwd(gq[R], b.view(gkv[R], half, n - half), gout[R]);
      b.merge(Stream::Compute, part, gout[R]);
      out[R] = b.buffer(r, BufKind::Out, r, BufInit::None);
      b.results(r).out = out[R];
    }
    scatter_back(Stream::Out, gout, out);
    return gq;
  }

  /// The backward with the bundle packed on the gathered heads.
  void backward_on_heads(const std::vector<BufferId>& gq) {
    b.set_phase(ir::Phase::Bwd);
    std::vector<BufferId> dout(N);
    for (int r = 0; r < n; ++r) dout[std::size_t(r)] = b.buffer(r, BufKind::Dout, r, BufInit::Input);
    const auto gdo = all_to_all(Stream::Q, BufKind::Dout, dout, BufInit::None);
    std::vector<BufferId> gqb(N);
    for (int r = 0; r < n; ++r) {
      const auto R = std::size_t(r);
      gqb[R] = b.buffer(r, BufKind::QBundle, heads_of(r, 0, n), BufInit::None);
      b.pack(gq[R], gdo[R], gout[R], gqb[R]);
    }
    // Backward over the gathered bundle below.
    std::vector<BufferId> gdq(N), gdkv(N);
    for (int r = 0; r < n; ++r) {
      const auto R = std::size_t(r);
      gdq[R] = b.buffer(r, BufKind::Dq, heads_of(r, 0, n), BufInit::Zero);
      gdkv[R] = b.buffer(r, BufKind::Dkv, heads_of(r, 0, n), BufInit::Zero);
      b.compute_bwd(gqb[R], gkv[R], gdq[R], gdkv[R]);
    }
    gradients_home(gdq, gdkv);
  }

  /// The backward on whole shards.
  void backward() {
    b.set_phase(ir::Phase::Bwd);
    std::vector<BufferId> qb(N);
    for (int r = 0; r < n; ++r) {
      const auto R = std::size_t(r);
      const BufferId dout = b.buffer(r, BufKind::Dout, r, BufInit::Input);
      if (w.pass == ir::PassKind::Bwd) {
        out[R] = b.buffer(r, BufKind::Out, r, BufInit::Input);
        b.results(r).out = out[R];
      }
      qb[R] = b.buffer(r, BufKind::QBundle, r, BufInit::None);
      b.pack(q[R], dout, out[R], qb[R]);
    }
    const auto gqb = all_to_all(Stream::Q, BufKind::QBundle, qb, BufInit::None);
    if (gkv.empty()) gkv = all_to_all(Stream::Kv, BufKind::Kv, kv, BufInit::None);
    std::vector<BufferId> gdq(N), gdkv(N);
    for (int r = 0; r < n; ++r) {
      const auto R = std::size_t(r);
      gdq[R] = b.buffer(r, BufKind::Dq, heads_of(r, 0, n), BufInit::Zero);
      gdkv[R] = b.buffer(r, BufKind::Dkv, heads_of(r, 0, n), BufInit::Zero);
      const BufferId part = b.buffer(r, BufKind::Dq, heads_of(r, 0, n), BufInit::Zero);
      const int half = n / 2;
      b.compute_bwd(gqb[R], b.view(gkv[R], 0, half), part, b.view(gdkv[R], 0, half));
      b.compute_bwd(gqb[R], b.view(gkv[R], half, n - half), gdq[R], b.view(gdkv[R], half, n - half));
      b.accumulate(Stream::Compute, part, gdq[R]);
    }
    gradients_home(gdq, gdkv);
  }

  const ir::Workload& w;
  int n, hr;
  std::size_t N;
  sched::PlanBuilder b;
  std::vector<BufferId> q, kv, out, gkv, gout;
};

ir::Plan ulysses_plan(const ir::Workload& w, int n, bool pack_on_heads) {
  return UlyssesTestPlan(w, n).build(pack_on_heads);
}

// TASP-style: KV shards travel in `parts` token parts to every other rank; queries are
// computed per part into per-part output accumulators, placed into the whole output at
// the end; the backward sends dKV partials of each part back to the owner, who
// accumulates them per part and places the parts into its whole dKV.
ir::Plan parts_plan(const ir::Workload& w, int n, int parts) {
  sched::PlanBuilder b("tasp-test", w, n, 1);
  b.set_parts(parts);
  const auto N = std::size_t(n), P = std::size_t(parts);
  const int hk = int(w.kv_heads);
  auto part_of = [&](int x, int p) { return Region{x, x + 1, 0, hk, p, p + 1}; };
  std::vector<BufferId> q(N), kv(N), out(N);
  std::vector<std::vector<BufferId>> kvp(N, std::vector<BufferId>(P)), qp(N, std::vector<BufferId>(P)),
      outp(N, std::vector<BufferId>(P));
  for (int r = 0; r < n; ++r) {
    const auto R = std::size_t(r);
    q[R] = b.buffer(r, BufKind::Q, r, BufInit::Input);
    kv[R] = b.buffer(r, BufKind::Kv, r, BufInit::Input);
    out[R] = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    b.results(r).out = out[R];
    for (int p = 0; p < parts; ++p) {
      kvp[R][std::size_t(p)] = b.buffer(r, BufKind::Kv, part_of(r, p), BufInit::None);
      b.copy(Stream::Compute, kv[R], kvp[R][std::size_t(p)]);
      qp[R][std::size_t(p)] = b.buffer(r, BufKind::Q, part_of(r, p), BufInit::None);
      b.copy(Stream::Compute, q[R], qp[R][std::size_t(p)]);
      outp[R][std::size_t(p)] = b.buffer(r, BufKind::Out, part_of(r, p), BufInit::Zero);
    }
  }
  b.set_phase(ir::Phase::Fwd);
  // received[r][s][p]: rank s's kv part p on rank r.
  std::vector<std::vector<std::vector<BufferId>>> received(
      N, std::vector<std::vector<BufferId>>(N, std::vector<BufferId>(P)));
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < parts; ++p)
      b.compute_fwd(qp[std::size_t(r)][std::size_t(p)], kv[std::size_t(r)], outp[std::size_t(r)][std::size_t(p)]);
  for (int s = 0; s < n; ++s)
    for (int r = 0; r < n; ++r) {
      if (r == s) continue;
      for (int p = 0; p < parts; ++p) {
        const auto t = b.transfer(Stream::Kv, kvp[std::size_t(s)][std::size_t(p)], r);
        received[std::size_t(r)][std::size_t(s)][std::size_t(p)] = t.dst;
        for (int pq = 0; pq < parts; ++pq)
          b.compute_fwd(qp[std::size_t(r)][std::size_t(pq)], t.dst, outp[std::size_t(r)][std::size_t(pq)]);
      }
    }
  for (int r = 0; r < n; ++r)
    for (int p = 0; p < parts; ++p) b.copy(Stream::Compute, outp[std::size_t(r)][std::size_t(p)], out[std::size_t(r)]);
  if (w.pass == ir::PassKind::Fwd) return std::move(b).finish();

  b.set_phase(ir::Phase::Bwd);
  std::vector<BufferId> qb(N), dq(N), dkv(N);
  std::vector<std::vector<BufferId>> dkvp(N, std::vector<BufferId>(P));
  for (int r = 0; r < n; ++r) {
    const auto R = std::size_t(r);
    const BufferId dout = b.buffer(r, BufKind::Dout, r, BufInit::Input);
    qb[R] = b.buffer(r, BufKind::QBundle, r, BufInit::None);
    b.pack(q[R], dout, out[R], qb[R]);
    dq[R] = b.buffer(r, BufKind::Dq, r, BufInit::Zero);
    for (int p = 0; p < parts; ++p) {
      dkvp[R][std::size_t(p)] = b.buffer(r, BufKind::Dkv, part_of(r, p), BufInit::Zero);
      b.compute_bwd(qb[R], kvp[R][std::size_t(p)], dq[R], dkvp[R][std::size_t(p)]);
    }
  }
  for (int s = 0; s < n; ++s)
    for (int r = 0; r < n; ++r) {
      if (r == s) continue;
      for (int p = 0; p < parts; ++p) {
        const BufferId partial = b.buffer(r, BufKind::Dkv, part_of(s, p), BufInit::Zero);
        b.compute_bwd(qb[std::size_t(r)], received[std::size_t(r)][std::size_t(s)][std::size_t(p)], dq[std::size_t(r)],
                      partial);
        const auto t = b.transfer(Stream::Dkv, partial, s);
        b.accumulate(Stream::Compute, t.dst, dkvp[std::size_t(s)][std::size_t(p)]);
      }
    }
  for (int r = 0; r < n; ++r) {
    const auto R = std::size_t(r);
    dkv[R] = b.buffer(r, BufKind::Dkv, r, BufInit::None);
    for (int p = 0; p < parts; ++p) b.copy(Stream::Compute, dkvp[R][std::size_t(p)], dkv[R]);
    b.results(r).dq = dq[R];
    b.results(r).dkv = dkv[R];
  }
  return std::move(b).finish();
}

void expect_exact(const ir::Plan& plan, bool regions = true) {
  ASSERT_EQ(plan.has_regions(), regions);
  const auto& w = plan.workload;
  const auto in = plan_inputs(w, 5);
  const auto ref = reference_attention(w, in, w.pass != ir::PassKind::Fwd);
  // Unvalidated: the causal cases' hand-built plans also compute blocks the mask empties, a waste the
  // validator's coverage rule refuses and the executor must still get right.
  auto res = run_threads_unvalidated(plan, in, RunOptions{60});
  ASSERT_TRUE(res.ok()) << res.error().message();
  const auto chk = check_against(res->out, ref, w.dtype);
  const bool fwd = w.pass != ir::PassKind::Bwd, bwd = w.pass != ir::PassKind::Fwd;
  const std::tuple<const char*, const std::optional<TensorError>*, bool> all[] = {
      {"out", &chk.out, fwd}, {"lse", &chk.lse, fwd}, {"dq", &chk.dq, bwd}, {"dk", &chk.dk, bwd}, {"dv", &chk.dv, bwd}};
  for (const auto& [name, e, want] : all) {
    if (!want) continue;
    ASSERT_TRUE(e->has_value()) << name << " was not produced";
    EXPECT_LE((*e)->max_rel, 1e-5) << name << " max_abs " << (*e)->max_abs;
  }
}

class UlyssesStyle : public ::testing::TestWithParam<std::tuple<int, bool, ir::Layout, bool, bool>> {};

TEST_P(UlyssesStyle, MatchesDenseReference) {
  const auto [n, causal, layout, gqa, pack_on_heads] = GetParam();
  const auto w = workload_of({n, causal, layout, gqa, ir::PassKind::Both});
  expect_exact(ulysses_plan(w, n, pack_on_heads));
}

INSTANTIATE_TEST_SUITE_P(Plans, UlyssesStyle,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Bool(),
                                            ::testing::Values(ir::Layout::Contiguous, ir::Layout::Zigzag),
                                            ::testing::Bool(), ::testing::Bool()));

TEST(UlyssesStyle, ForwardOnlyAndBackwardOnly) {
  for (auto pass : {ir::PassKind::Fwd, ir::PassKind::Bwd}) {
    const auto w = workload_of({4, true, ir::Layout::Zigzag, true, pass});
    expect_exact(ulysses_plan(w, 4, false));
    if (HasFailure()) return;
  }
}

// The judge is not vacuous on region plans: without one of the two ranged computes
// of rank 0, its heads miss half the keys and the check says so.
TEST(UlyssesStyle, DroppedRangedComputeFailsTheCheck) {
  const auto w = workload_of({4, true, ir::Layout::Zigzag, true, ir::PassKind::Fwd});
  auto plan = ulysses_plan(w, 4, false);
  for (ir::OpId id = 0; id < static_cast<ir::OpId>(plan.size()); ++id)
    if (plan.op(id).kind == ir::OpKind::Compute && plan.op(id).rank == 0) {
      const ir::OpId ids[] = {id};
      plan.erase_ops(ids);
      break;
    }
  const auto in = plan_inputs(w, 5);
  auto res = run_threads_unvalidated(plan, in, RunOptions{60});
  ASSERT_TRUE(res.ok()) << res.error().message();
  const auto chk = check_against(res->out, reference_attention(w, in, false), w.dtype);
  EXPECT_FALSE(chk.ok());
}

class PartsStyle : public ::testing::TestWithParam<std::tuple<int, int, bool, ir::Layout, bool>> {};

TEST_P(PartsStyle, MatchesDenseReference) {
  const auto [n, parts, causal, layout, gqa] = GetParam();
  const auto w = workload_of({n, causal, layout, gqa, ir::PassKind::Both});
  expect_exact(parts_plan(w, n, parts), parts > 1);  // one part: every buffer is a whole shard
}

INSTANTIATE_TEST_SUITE_P(Plans, PartsStyle,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(1, 2, 4), ::testing::Bool(),
                                            ::testing::Values(ir::Layout::Contiguous, ir::Layout::Zigzag),
                                            ::testing::Bool()));

}  // namespace
}  // namespace charm::rt
