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
//
// The *_over forms run several rings side by side over any buffers (USP runs
// one ring per Ulysses head slice across domains, over gathered regions).
//
// Buffers in flight are bounded (double buffering): a rank receives KV into
// two slots, and backward adds two slots for dK/dV partials and two for the
// running sums; a slot is written again only after its previous content is
// computed on and sent on. So a lagging dK/dV stream holds the compute back
// instead of piling up buffers, and peak memory is fixed by the schedule.

#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

/// The kv exchange of one ring step: in every ring, member i sends `cur` to member i+1.
std::vector<BufferId> ring_shift(PlanBuilder& b, Stream stream, const std::vector<Ring>& rings,
                                 const std::vector<BufferId>& cur, const std::vector<OpId>& barrier,
                                 BufferRing& slots) {
  const auto N = std::size_t(b.ranks());
  const std::vector<int> group = b.new_group_per_rank();
  std::vector<BufferId> next(N, kNone);
  for (const Ring& ring : rings) {
    for (std::size_t i = 0; i < ring.size(); ++i) {
      const RankId r = ring[i], dst = ring[(i + 1) % ring.size()];
      // The barrier op of each side, if any (no allocation per transfer).
      auto wait_for = [&](RankId x) {
        const OpId w = barrier.empty() ? kNone : barrier[std::size_t(x)];
        return w == kNone ? std::span<const OpId>() : std::span<const OpId>(&barrier[std::size_t(x)], 1);
      };
      const BufferId src = cur[std::size_t(r)];
      const BufferId into = b.buffer(slots, dst, b.buf(src).kind, b.region(src), BufInit::None);
      auto t = b.transfer(stream, src, dst, group[std::size_t(r)], group[std::size_t(dst)], wait_for(r), wait_for(dst),
                          into);
      next[std::size_t(dst)] = t.dst;
    }
  }
  return next;
}

std::size_t ring_length(const std::vector<Ring>& rings) {
  const std::size_t len = rings.empty() ? 0 : rings.front().size();
  for (const Ring& r : rings) CHARM_ASSERT(r.size() == len, "rings of one schedule have one length");
  return len;
}

/// A zeroed accumulator of `kind` on every rank of the rings, of the region of that rank's `like`
/// buffer (kNone on a rank no ring holds).
std::vector<BufferId> zeroed_on_rings(PlanBuilder& b, const std::vector<Ring>& rings, BufKind kind,
                                      const std::vector<BufferId>& like) {
  std::vector<BufferId> acc(std::size_t(b.ranks()), kNone);
  for (const Ring& ring : rings)
    for (RankId r : ring) acc[std::size_t(r)] = b.buffer(r, kind, b.region(like[std::size_t(r)]), BufInit::Zero);
  return acc;
}

/// The steps of the rings: each step launches the KV exchange for the next step (after the
/// computes of the step before, whose slots it overwrites), then calls `compute(rank, kv held)` for
/// every member, which returns its compute op (kNone: nothing computed), then `end_of_step()`.
template <class Compute, class EndOfStep>
void walk_rings(PlanBuilder& b, const std::vector<Ring>& rings, const std::vector<BufferId>& kv, Compute compute,
                EndOfStep end_of_step) {
  const auto N = std::size_t(b.ranks());
  const std::size_t len = ring_length(rings);
  std::vector<BufferId> cur = kv;
  std::vector<OpId> prev_compute(N, kNone), last_compute(N, kNone);
  BufferRing kv_slots(b.ranks(), 2);
  for (std::size_t step = 0; step < len; ++step) {
    std::vector<BufferId> next;
    if (step + 1 < len) next = ring_shift(b, Stream::Kv, rings, cur, prev_compute, kv_slots);
    for (const Ring& ring : rings)
      for (RankId r : ring) {
        const auto i = std::size_t(r);
        if (const OpId c = compute(i, cur[i]); c != kNone) last_compute[i] = c;
      }
    prev_compute = last_compute;
    end_of_step();
    if (step + 1 < len) cur = std::move(next);
  }
}

}  // namespace

std::vector<Ring> one_ring(int ranks) {
  Ring ring(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) ring[std::size_t(r)] = r;
  return {ring};
}

std::vector<BufferId> ring_forward_over(PlanBuilder& b, const std::vector<Ring>& rings, const std::vector<BufferId>& q,
                                        const std::vector<BufferId>& kv) {
  std::vector<BufferId> acc = zeroed_on_rings(b, rings, BufKind::Out, q);
  walk_rings(
      b, rings, kv,
      [&](std::size_t i, BufferId held) {
        return b.any_visible(q[i], held) ? b.compute_fwd(q[i], held, acc[i]) : kNone;
      },
      [] {});
  return acc;
}

RingGradients ring_backward_over(PlanBuilder& b, const std::vector<Ring>& rings, const std::vector<BufferId>& qbundle,
                                 const std::vector<BufferId>& kv) {
  RingGradients g{zeroed_on_rings(b, rings, BufKind::Dq, qbundle),
                  std::vector<BufferId>(std::size_t(b.ranks()), kNone)};
  auto& running = g.dkv;
  BufferRing partial_slots(b.ranks(), 1), sum_slots(b.ranks(), 2);
  const bool sums_move = ring_length(rings) > 1;
  walk_rings(
      b, rings, kv,
      // Each block's dK/dV go into a fresh partial, so the compute never waits
      // for the running sum in flight; the sum picks the partial up on arrival.
      [&](std::size_t i, BufferId held) {
        const auto r = RankId(i);
        const BufferId part = b.buffer(partial_slots, r, BufKind::Dkv, b.region(held), BufInit::Zero);
        const OpId c = b.any_visible(qbundle[i], held) ? b.compute_bwd(qbundle[i], held, g.dq[i], part) : kNone;
        if (running[i] == kNone)
          running[i] = part;
        else
          b.accumulate(Stream::Dkv, part, running[i]);
        return c;
      },
      // The running dK/dV sum moves one step behind its KV; after the last step it reaches its owner.
      [&] {
        if (sums_move) running = ring_shift(b, Stream::Dkv, rings, running, {}, sum_slots);
      });
  return g;
}

void ring_forward(PlanBuilder& b, const std::vector<RankState>& st) {
  const auto acc = ring_forward_over(b, one_ring(b.ranks()), column(st, &RankState::q), column(st, &RankState::kv));
  for (std::size_t r = 0; r < st.size(); ++r) b.results(RankId(r)).out = acc[r];
}

void ring_backward(PlanBuilder& b, const std::vector<RankState>& st) {
  const auto g =
      ring_backward_over(b, one_ring(b.ranks()), column(st, &RankState::qbundle), column(st, &RankState::kv));
  for (std::size_t r = 0; r < st.size(); ++r) {
    b.results(RankId(r)).dq = g.dq[r];
    b.results(RankId(r)).dkv = g.dkv[r];
  }
}

}  // namespace charm::sched::detail
