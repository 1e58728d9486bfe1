// All-gather of KV (TransformerEngine's `all_gather` context-parallel mode).
//
//   step 1 .. n-1:  ring all-gather, r -> r+1 forwards the block it got last
//   then:           Q_r * KV_y for every y (no overlap with the gather)
//
// Backward: gather KV again, compute every block, then a ring reduce-scatter of
// the dK/dV partials (n-1 steps; each rank adds its share and forwards), so
// each partial lands on its owner with every contribution.

#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

/// Ring all-gather; returns, per rank, the KV buffers of every owner (index = owner).
std::vector<std::vector<BufferId>> gather_kv(PlanBuilder& b, const std::vector<RankState>& st) {
  const int n = b.ranks();
  const auto N = std::size_t(n);
  std::vector<std::vector<BufferId>> have(N, std::vector<BufferId>(N, kNone));
  std::vector<BufferId> cur(N);
  for (std::size_t r = 0; r < N; ++r) have[r][r] = cur[r] = st[r].kv;
  for (int step = 1; step < n; ++step) {
    std::vector<int> group(N);
    for (auto& g : group) g = b.new_group();
    std::vector<BufferId> next(N);
    for (int r = 0; r < n; ++r) {
      const int dst = (r + 1) % n;
      auto t = b.transfer(Stream::Kv, cur[std::size_t(r)], dst, group[std::size_t(r)], group[std::size_t(dst)]);
      next[std::size_t(dst)] = t.dst;
      have[std::size_t(dst)][std::size_t(b.buf(t.dst).owner)] = t.dst;
    }
    cur = std::move(next);
  }
  return have;
}

/// Every gathered block's computation waits for the whole gather (one collective).
std::vector<OpId> gather_done(PlanBuilder& b, const std::vector<std::vector<BufferId>>& have, std::size_t r) {
  OpId last = kNone;
  for (BufferId kv : have[r])
    if (OpId w = b.last_writer(kv); w != kNone) last = std::max(last, w);
  return last == kNone ? std::vector<OpId>{} : std::vector<OpId>{last};
}

} // namespace

void allgather_forward(PlanBuilder& b, const std::vector<RankState>& st) {
  const auto N = std::size_t(b.ranks());
  const auto have = gather_kv(b, st);
  for (std::size_t r = 0; r < N; ++r) {
    const BufferId acc = b.buffer(RankId(r), BufKind::Out, RankId(r), BufInit::Zero);
    const auto wait = gather_done(b, have, r);
    for (std::size_t k = 0; k < N; ++k) {
      const std::size_t y = (r + N - k) % N;  // the local block first
      if (b.visible(RankId(r), RankId(y))) b.compute_fwd(st[r].q, have[r][y], acc, wait);
    }
    b.results(RankId(r)).out = acc;
  }
}

void allgather_backward(PlanBuilder& b, const std::vector<RankState>& st) {
  const int n = b.ranks();
  const auto N = std::size_t(n);
  const auto have = gather_kv(b, st);
  std::vector<std::vector<BufferId>> partial(N, std::vector<BufferId>(N, kNone));
  for (std::size_t r = 0; r < N; ++r) {
    const BufferId dq = b.buffer(RankId(r), BufKind::Dq, RankId(r), BufInit::Zero);
    const auto wait = gather_done(b, have, r);
    for (std::size_t k = 0; k < N; ++k) {
      const std::size_t y = (r + N - k) % N;
      partial[r][y] = b.buffer(RankId(r), BufKind::Dkv, RankId(y), BufInit::Zero);
      if (b.visible(RankId(r), RankId(y))) b.compute_bwd(st[r].qbundle, have[r][y], dq, partial[r][y], wait);
    }
    b.results(RankId(r)).dq = dq;
  }
  // Ring reduce-scatter: at step s rank r sends the running sum for owner
  // (r - s) mod n to r+1, which adds its own share. After n-1 steps the sum for
  // owner y sits on y.
  std::vector<BufferId> running(N);
  for (std::size_t r = 0; r < N; ++r) running[r] = partial[r][(r + N - 1) % N];
  for (int step = 1; step < n; ++step) {
    std::vector<int> group(N);
    for (auto& g : group) g = b.new_group();
    // All transfers of the step first: an accumulate between a rank's receive and
    // send would split its ncclGroup and chain the step around the ring.
    std::vector<BufferId> received(N), next(N);
    for (int r = 0; r < n; ++r) {
      const auto dst = std::size_t((r + 1) % n);
      received[dst] = b.transfer(Stream::Dkv, running[std::size_t(r)], RankId(dst), group[std::size_t(r)], group[dst]).dst;
    }
    for (std::size_t r = 0; r < N; ++r) {
      const RankId owner = b.buf(received[r]).owner;
      b.accumulate(Stream::Dkv, received[r], partial[r][std::size_t(owner)]);
      next[r] = partial[r][std::size_t(owner)];
    }
    running = std::move(next);
  }
  for (std::size_t r = 0; r < N; ++r) b.results(RankId(r)).dkv = n == 1 ? partial[r][r] : running[r];
}

} // namespace charm::sched::detail
