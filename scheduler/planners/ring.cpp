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
// On the balanced layout (packed documents placed by a solver) a shard travels only
// as far as its last reader: the member furthest along the ring whose queries see
// one of its keys (its reach). KV goes no further. In the backward the owner keeps its
// own block's dK/dV, the running sum starts at the next reader and goes home straight
// from the reach, on a stream of its own (Out: results going home) so that the ring's
// sums behind it do not wait, and is added in there. Every other layout sends every shard
// all the way round, as ring-flash-attention and TransformerEngine do.
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

/// How far each rank's shard travels along its ring: the furthest member after it whose queries
/// see one of its keys (0: none), on the balanced layout; all the way round (len - 1) otherwise.
std::vector<std::size_t> ring_reach(const PlanBuilder& b, const std::vector<Ring>& rings,
                                    const std::vector<BufferId>& q, const std::vector<BufferId>& kv) {
  std::vector<std::size_t> reach(std::size_t(b.ranks()), 0);
  const bool pruned = b.workload().layout == Layout::Balanced;
  for (const Ring& ring : rings)
    for (std::size_t o = 0; o < ring.size(); ++o) {
      std::size_t& k = reach[std::size_t(ring[o])];
      k = ring.size() - 1;
      if (!pruned) continue;
      while (k > 0 && !b.any_visible(q[std::size_t(ring[(o + k) % ring.size()])], kv[std::size_t(ring[o])])) --k;
    }
  return reach;
}

/// The kv exchange of one ring step: in every ring, member i sends `cur` to member i+1 where
/// `moves(rank)` says its buffer goes on (and it holds one).
template <class Moves>
std::vector<BufferId> ring_shift(PlanBuilder& b, Stream stream, const std::vector<Ring>& rings,
                                 const std::vector<BufferId>& cur, const std::vector<OpId>& barrier, BufferRing& slots,
                                 Moves moves) {
  const auto N = std::size_t(b.ranks());
  const std::vector<int> group = b.new_group_per_rank();
  std::vector<BufferId> next(N, kNone);
  for (const Ring& ring : rings) {
    for (std::size_t i = 0; i < ring.size(); ++i) {
      const RankId r = ring[i], dst = ring[(i + 1) % ring.size()];
      const BufferId src = cur[std::size_t(r)];
      if (src == kNone || !moves(r)) continue;
      // The barrier op of each side, if any (no allocation per transfer).
      auto wait_for = [&](RankId x) {
        const OpId w = barrier.empty() ? kNone : barrier[std::size_t(x)];
        return w == kNone ? std::span<const OpId>() : std::span<const OpId>(&barrier[std::size_t(x)], 1);
      };
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

/// `from` passed one step along the rings: member i+1 then holds what member i held.
std::vector<RankId> passed_on(const std::vector<Ring>& rings, const std::vector<RankId>& from) {
  std::vector<RankId> next(from.size(), kNone);
  for (const Ring& ring : rings)
    for (std::size_t i = 0; i < ring.size(); ++i)
      next[std::size_t(ring[(i + 1) % ring.size()])] = from[std::size_t(ring[i])];
  return next;
}

/// The steps of the rings: each step launches the KV exchange for the next step (after the
/// computes of the step before, whose slots it overwrites) of the shards whose reach goes further, then
/// calls `compute(rank, kv held, its owner)` for every member holding one, which returns its compute op
/// (kNone: nothing computed), then `end_of_step(step, owners)`, owners[r] being whose shard r held.
template <class Compute, class EndOfStep>
void walk_rings(PlanBuilder& b, const std::vector<Ring>& rings, const std::vector<BufferId>& kv,
                const std::vector<std::size_t>& reach, Compute compute, EndOfStep end_of_step) {
  const auto N = std::size_t(b.ranks());
  const std::size_t len = ring_length(rings);
  std::vector<BufferId> cur = kv;
  std::vector<RankId> from(N, kNone);  // whose shard each member holds this step
  for (const Ring& ring : rings)
    for (RankId r : ring) from[std::size_t(r)] = r;
  std::vector<OpId> prev_compute(N, kNone), last_compute(N, kNone);
  BufferRing kv_slots(b.ranks(), 2);
  for (std::size_t step = 0; step < len; ++step) {
    std::vector<BufferId> next;
    if (step + 1 < len)
      next = ring_shift(b, Stream::Kv, rings, cur, prev_compute, kv_slots,
                        [&](RankId r) { return step + 1 <= reach[std::size_t(from[std::size_t(r)])]; });
    for (const Ring& ring : rings)
      for (RankId r : ring) {
        const auto i = std::size_t(r);
        if (cur[i] == kNone) continue;
        if (const OpId c = compute(i, cur[i], from[i]); c != kNone) last_compute[i] = c;
      }
    prev_compute = last_compute;
    end_of_step(step, from);
    if (step + 1 < len) {
      cur = std::move(next);
      from = passed_on(rings, from);
    }
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
      b, rings, kv, ring_reach(b, rings, q, kv),
      [&](std::size_t i, BufferId held, RankId) {
        return b.any_visible(q[i], held) ? b.compute_fwd(q[i], held, acc[i]) : kNone;
      },
      [](std::size_t, const std::vector<RankId>&) {});
  return acc;
}

RingGradients ring_backward_over(PlanBuilder& b, const std::vector<Ring>& rings, const std::vector<BufferId>& qbundle,
                                 const std::vector<BufferId>& kv) {
  RingGradients g{zeroed_on_rings(b, rings, BufKind::Dq, qbundle),
                  std::vector<BufferId>(std::size_t(b.ranks()), kNone)};
  std::vector<BufferId> running(std::size_t(b.ranks()), kNone);
  BufferRing partial_slots(b.ranks(), 1), sum_slots(b.ranks(), 2);
  const std::size_t len = ring_length(rings);
  const std::vector<std::size_t> reach = ring_reach(b, rings, qbundle, kv);
  // Pruned (the balanced layout): the owner keeps its own block's dK/dV as its result, the running sum starts at
  // the first reader after it, and goes home from the reach, where it is added in.
  const bool pruned = b.workload().layout == Layout::Balanced && len > 1;
  walk_rings(
      b, rings, kv, reach,
      // Each block's dK/dV go into a fresh partial, so the compute never waits
      // for the running sum in flight; the sum picks the partial up on arrival.
      [&](std::size_t i, BufferId held, RankId owner) {
        const auto r = RankId(i);
        const bool own = pruned && owner == r;
        const BufferId part = own ? b.buffer(r, BufKind::Dkv, b.region(held), BufInit::Zero)
                                  : b.buffer(partial_slots, r, BufKind::Dkv, b.region(held), BufInit::Zero);
        const OpId c = b.any_visible(qbundle[i], held) ? b.compute_bwd(qbundle[i], held, g.dq[i], part) : kNone;
        if (own)
          g.dkv[i] = part;
        else if (running[i] == kNone)
          running[i] = part;
        else
          b.accumulate(Stream::Dkv, part, running[i]);
        return c;
      },
      // The running dK/dV sum moves one step behind its KV; after the last step it reaches its owner.
      [&](std::size_t step, const std::vector<RankId>& owners) {
        for (RankId r = 0; pruned && r < b.ranks(); ++r) {
          const RankId home = owners[std::size_t(r)];
          if (running[std::size_t(r)] == kNone || step != reach[std::size_t(home)]) continue;
          const BufferId arrived = b.transfer(Stream::Out, running[std::size_t(r)], home).dst;
          b.accumulate(Stream::Out, arrived, g.dkv[std::size_t(home)]);
          running[std::size_t(r)] = kNone;
        }
        if (len > 1) running = ring_shift(b, Stream::Dkv, rings, running, {}, sum_slots, [](RankId) { return true; });
      });
  if (!pruned) g.dkv = running;
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
