// Ring-Attention (and Ring-Zigzag, the same schedule on the zigzag layout).
//
//   step:     0          1          2     ...   n-1
//   rank r:  Q_r*KV_r   Q_r*KV_r-1  Q_r*KV_r-2   Q_r*KV_r+1
//   kv:       r -> r+1 (the block just received moves on)
//
// Each step launches the next KV exchange and the current block's attention
// together and waits for both (ring-flash-attention's loop), so step i+1's
// exchange depends on the compute of step i-1: O_ring = sum l(Tcomm_i - Tcomp_i).
// Backward: KV travels the same way; each rank computes a block's dK/dV into a
// fresh partial, adds it to the running sum that arrives one step behind the
// KV, and passes the sum on; after n steps the sum lands on its owner.

#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

/// The kv exchange of one ring step: every rank sends `cur` to r+1.
std::vector<BufferId> ring_shift(PlanBuilder& b, Stream stream, const std::vector<BufferId>& cur,
                                 const std::vector<OpId>& barrier) {
  const int n = b.ranks();
  std::vector<int> group(static_cast<std::size_t>(n));
  for (auto& g : group) g = b.new_group();
  std::vector<BufferId> next(static_cast<std::size_t>(n), kNone);
  for (int r = 0; r < n; ++r) {
    const int dst = (r + 1) % n;
    std::vector<OpId> es, ed;
    if (!barrier.empty() && barrier[std::size_t(r)] != kNone) es.push_back(barrier[std::size_t(r)]);
    if (!barrier.empty() && barrier[std::size_t(dst)] != kNone) ed.push_back(barrier[std::size_t(dst)]);
    auto t = b.transfer(stream, cur[std::size_t(r)], dst, group[std::size_t(r)], group[std::size_t(dst)], es, ed);
    next[std::size_t(dst)] = t.dst;
  }
  return next;
}

} // namespace

void ring_forward(PlanBuilder& b, const std::vector<RankState>& st) {
  const int n = b.ranks();
  const auto N = static_cast<std::size_t>(n);
  std::vector<BufferId> acc(N), cur(N);
  std::vector<OpId> prev_compute(N, kNone), last_compute(N, kNone);
  for (std::size_t r = 0; r < N; ++r) {
    acc[r] = b.buffer(RankId(r), BufKind::Out, RankId(r), BufInit::Zero);
    cur[r] = st[r].kv;
  }
  for (int step = 0; step < n; ++step) {
    // Launch the exchange for step+1 (after the compute of step-1), then compute step.
    std::vector<BufferId> next;
    if (step + 1 < n) next = ring_shift(b, Stream::Kv, cur, prev_compute);
    for (std::size_t r = 0; r < N; ++r) {
      if (!b.visible(RankId(r), b.buf(cur[r]).owner)) continue;
      last_compute[r] = b.compute_fwd(st[r].q, cur[r], acc[r]);
    }
    prev_compute = last_compute;
    if (step + 1 < n) cur = std::move(next);
  }
  for (std::size_t r = 0; r < N; ++r) b.results(RankId(r)).out = acc[r];
}

void ring_backward(PlanBuilder& b, const std::vector<RankState>& st) {
  const int n = b.ranks();
  const auto N = static_cast<std::size_t>(n);
  std::vector<BufferId> dq(N), cur(N), running(N, kNone);
  std::vector<OpId> prev_compute(N, kNone), last_compute(N, kNone);
  for (std::size_t r = 0; r < N; ++r) {
    dq[r] = b.buffer(RankId(r), BufKind::Dq, RankId(r), BufInit::Zero);
    cur[r] = st[r].kv;
  }
  for (int step = 0; step < n; ++step) {
    std::vector<BufferId> next;
    if (step + 1 < n) next = ring_shift(b, Stream::Kv, cur, prev_compute);
    // Each block's dK/dV go into a fresh partial, so the compute never waits
    // for the running sum in flight; the sum picks the partial up on arrival.
    for (std::size_t r = 0; r < N; ++r) {
      const RankId owner = b.buf(cur[r]).owner;
      const BufferId part = b.buffer(RankId(r), BufKind::Dkv, owner, BufInit::Zero);
      if (b.visible(RankId(r), owner)) last_compute[r] = b.compute_bwd(st[r].qbundle, cur[r], dq[r], part);
      if (running[r] == kNone) running[r] = part;
      else b.accumulate(Stream::Dkv, part, running[r]);
    }
    prev_compute = last_compute;
    // The running dK/dV sum moves one step behind its KV; after the last step it reaches its owner.
    if (n > 1) running = ring_shift(b, Stream::Dkv, running, {});
    if (step + 1 < n) cur = std::move(next);
  }
  for (std::size_t r = 0; r < N; ++r) {
    b.results(RankId(r)).dq = dq[r];
    b.results(RankId(r)).dkv = running[r];
  }
}

} // namespace charm::sched::detail
