// All-gather of KV (TransformerEngine's `all_gather` context-parallel mode).
//
//   step 1 .. n-1:  ring all-gather, r -> r+1 forwards the block it got last
//   then:           Q_r * KV_y for every y (no overlap with the gather)
//
// Backward: gather KV again, compute every block, and reduce-scatter the dK/dV
// partials around the ring (n-1 steps; each rank adds its share and forwards),
// so each partial lands on its owner with every contribution. The reduce-scatter
// follows the compute block by block, and a rank holds only two partials in
// flight besides its own (plus one arriving sum), so peak memory is fixed by the
// schedule whichever of the two runs ahead.

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
    const std::vector<int> group = b.new_group_per_rank();
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

}  // namespace

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
  // partial[r][k]: rank r's dK/dV of its k-th block, owner (r - k) mod n. Block 0 is
  // its own and ends as its result; the others come from two slots per rank, so a
  // reduce-scatter that lags holds the compute back instead of piling up partials.
  std::vector<std::vector<BufferId>> partial(N, std::vector<BufferId>(N, kNone));
  std::vector<BufferId> dq(N);
  std::vector<std::vector<OpId>> wait(N);
  for (std::size_t r = 0; r < N; ++r) {
    dq[r] = b.buffer(RankId(r), BufKind::Dq, RankId(r), BufInit::Zero);
    wait[r] = gather_done(b, have, r);
  }
  BufferRing partial_slots(n, 2), arrival_slots(n, 1);
  // Ring reduce-scatter step s (1 .. n-1): rank r sends its running sum for owner
  // (r - s) mod n (block s) to r+1, which adds it to its block s+1 of the same
  // owner. After n-1 steps the sum for owner y sits on y, in its block 0.
  auto reduce_step = [&](int s) {
    const std::vector<int> group = b.new_group_per_rank();
    // All transfers of the step first: an accumulate between a rank's receive and
    // send would split its ncclGroup and chain the step around the ring.
    std::vector<BufferId> received(N);
    for (int r = 0; r < n; ++r) {
      const auto dst = std::size_t((r + 1) % n);
      const BufferId src = partial[std::size_t(r)][std::size_t(s)];
      const BufferId into = b.buffer(arrival_slots, RankId(dst), BufKind::Dkv, b.buf(src).owner, BufInit::None);
      received[dst] = b.transfer(Stream::Dkv, src, RankId(dst), group[std::size_t(r)], group[dst], {}, {}, into).dst;
    }
    for (std::size_t r = 0; r < N; ++r) b.accumulate(Stream::Dkv, received[r], partial[r][std::size_t(s + 1) % N]);
  };
  // Step s needs block s+1, so it is emitted after that block's compute; block k
  // takes over the slot of block k-2, which step k-2 has sent on by then.
  for (std::size_t k = 0; k < N; ++k) {
    for (std::size_t r = 0; r < N; ++r) {
      const auto y = RankId((r + N - k) % N);  // the local block first
      partial[r][k] = k == 0 ? b.buffer(RankId(r), BufKind::Dkv, y, BufInit::Zero)
                             : b.buffer(partial_slots, RankId(r), BufKind::Dkv, y, BufInit::Zero);
      if (b.visible(RankId(r), y)) b.compute_bwd(st[r].qbundle, have[r][std::size_t(y)], dq[r], partial[r][k], wait[r]);
    }
    if (k >= 2) reduce_step(int(k) - 1);
  }
  if (n > 1) reduce_step(n - 1);
  for (std::size_t r = 0; r < N; ++r) {
    b.results(RankId(r)).dq = dq[r];
    b.results(RankId(r)).dkv = partial[r][0];
  }
}

}  // namespace charm::sched::detail
