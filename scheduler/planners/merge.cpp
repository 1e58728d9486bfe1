// The merge communication mechanism (paper Section 3.1): recursive doubling of KV.
//
//   level 1:  0<->1  2<->3  4<->5  6<->7     each rank sends the 1 block it holds
//   level 2:  0<->2  1<->3  4<->6  5<->7     ... the 2 blocks it holds
//   level 3:  0<->4  1<->5  2<->6  3<->7     ... the 4 blocks it holds
//
// Levels are bulk-synchronous (the Commwait of the paper's loop): level i's
// exchange starts once level i-1's exchange and computation are done, and
// level i computes the blocks that arrived at level i-1 (level 1: the local
// block). The blocks of the last level are computed after it. This is the
// structure of Eq. 3-4. Backward gathers KV the same way and returns the dK/dV
// partials by recursive halving (a reduce-scatter, levels in reverse).

#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

struct Gather {
  std::vector<std::vector<BufferId>> held;     // blocks each rank holds, in arrival order
  std::vector<std::vector<BufferId>> pending;  // blocks to compute at the current level
  std::vector<OpId> last_recv;                 // last kv receive of the previous level
};

/// One level's exchange; returns nothing but updates held/pending.
void gather_level(PlanBuilder& b, Gather& g, int level, const std::vector<OpId>& barrier) {
  const int n = b.ranks();
  const int stride = 1 << (level - 1);
  std::vector<std::vector<BufferId>> arrived(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const int p = r ^ stride;
    if (p < r) continue;
    const auto R = std::size_t(r), P = std::size_t(p);
    const auto count = g.held[R].size();
    CHARM_ASSERT(count == g.held[P].size(), "partners hold the same number of blocks");
    for (std::size_t k = 0; k < count; ++k) {
      std::vector<OpId> ea, eb;
      if (k == 0 && barrier[R] != kNone) ea.push_back(barrier[R]);
      if (k == 0 && barrier[P] != kNone) eb.push_back(barrier[P]);
      auto [rp, pr] = b.exchange(Stream::Kv, g.held[R][k], g.held[P][k], ea, eb);
      arrived[P].push_back(rp.dst);
      arrived[R].push_back(pr.dst);
      g.last_recv[P] = rp.recv;
      g.last_recv[R] = pr.recv;
    }
  }
  for (std::size_t r = 0; r < std::size_t(n); ++r) {
    g.held[r].insert(g.held[r].end(), arrived[r].begin(), arrived[r].end());
    g.pending[r] = std::move(arrived[r]);
  }
}

/// Runs the bulk-synchronous merge levels, calling `compute(rank, kv_buffer, extra_deps)`.
template <class ComputeFn>
void merge_levels(PlanBuilder& b, const std::vector<RankState>& st, ComputeFn compute) {
  const int n = b.ranks();
  const auto N = std::size_t(n);
  const int levels = log2_exact(n);
  Gather g;
  g.held.resize(N);
  g.pending.resize(N);
  g.last_recv.assign(N, kNone);
  for (std::size_t r = 0; r < N; ++r) g.held[r] = g.pending[r] = {st[r].kv};
  std::vector<OpId> last_compute(N, kNone);
  for (int level = 1; level <= levels + 1; ++level) {
    auto to_compute = g.pending;
    const auto sync_recv = g.last_recv;
    const auto barrier = last_compute;  // computations of the previous level
    if (level <= levels) gather_level(b, g, level, barrier);
    for (std::size_t r = 0; r < N; ++r) {
      std::vector<OpId> extra;
      if (sync_recv[r] != kNone) extra.push_back(sync_recv[r]);
      for (BufferId kv : to_compute[r]) {
        const OpId c = compute(RankId(r), kv, extra);
        if (c != kNone) last_compute[r] = c;
      }
    }
  }
}

}  // namespace

void merge_forward(PlanBuilder& b, const std::vector<RankState>& st) {
  const auto N = std::size_t(b.ranks());
  std::vector<BufferId> acc(N);
  for (std::size_t r = 0; r < N; ++r) acc[r] = b.buffer(RankId(r), BufKind::Out, RankId(r), BufInit::Zero);
  merge_levels(b, st, [&](RankId r, BufferId kv, const std::vector<OpId>& extra) -> OpId {
    if (!b.visible(r, b.buf(kv).owner)) return kNone;
    return b.compute_fwd(st[std::size_t(r)].q, kv, acc[std::size_t(r)], extra);
  });
  for (std::size_t r = 0; r < N; ++r) b.results(RankId(r)).out = acc[r];
}

void merge_backward(PlanBuilder& b, const std::vector<RankState>& st) {
  const int n = b.ranks();
  const auto N = std::size_t(n);
  std::vector<BufferId> dq(N);
  // partial[r][y]: the dK/dV contributions for owner y gathered on rank r.
  std::vector<std::vector<BufferId>> partial(N, std::vector<BufferId>(N, kNone));
  for (std::size_t r = 0; r < N; ++r) {
    dq[r] = b.buffer(RankId(r), BufKind::Dq, RankId(r), BufInit::Zero);
    for (std::size_t y = 0; y < N; ++y) partial[r][y] = b.buffer(RankId(r), BufKind::Dkv, RankId(y), BufInit::Zero);
  }
  merge_levels(b, st, [&](RankId r, BufferId kv, const std::vector<OpId>& extra) -> OpId {
    const RankId y = b.buf(kv).owner;
    if (!b.visible(r, y)) return kNone;
    return b.compute_bwd(st[std::size_t(r)].qbundle, kv, dq[std::size_t(r)], partial[std::size_t(r)][std::size_t(y)],
                         extra);
  });
  // Reduce-scatter by recursive halving: at level i, r keeps the half of its
  // 2^i-block group that holds r and hands the partner the other half.
  for (int level = log2_exact(n); level >= 1; --level) {
    const int stride = 1 << (level - 1);
    for (int r = 0; r < n; ++r) {
      const int p = r ^ stride;
      if (p < r) continue;
      // Owners in p's half (what r sends) and in r's half (what p sends), ascending.
      std::vector<int> to_p, to_r;
      const int base = (r >> level) << level;
      for (int y = base; y < base + (1 << level); ++y) ((y & stride) == (p & stride) ? to_p : to_r).push_back(y);
      for (std::size_t k = 0; k < to_p.size(); ++k) {
        const auto R = std::size_t(r), P = std::size_t(p);
        auto [rp, pr] = b.exchange(Stream::Dkv, partial[R][std::size_t(to_p[k])], partial[P][std::size_t(to_r[k])]);
        b.accumulate(Stream::Dkv, rp.dst, partial[P][std::size_t(to_p[k])]);
        b.accumulate(Stream::Dkv, pr.dst, partial[R][std::size_t(to_r[k])]);
      }
    }
  }
  for (std::size_t r = 0; r < N; ++r) {
    b.results(RankId(r)).dq = dq[r];
    b.results(RankId(r)).dkv = partial[r][r];
  }
}

}  // namespace charm::sched::detail
