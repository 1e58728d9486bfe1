// RM+ (paper Section 3.2): one run's units, the order of each stream, and their emission as ops.
//
// RM+ inside a group of R ranks (R a power of two), rank x, GenerateCommList:
//
//   level 1:          kv <-> x^1
//   level i >= 2:     round t = 0 .. 2^(i-2)-1, in parallel on two streams:
//                       kv <-> x ^ (2^(i-1) + t)            (pull their KV)
//                       q  <-> x ^ (2^(i-1) + 2^(i-2) + t)  (they compute our Q,
//                                                            return (O, LSE))
//
// Ordering the partners of a level by x XOR peer makes every round a perfect
// matching, so the paired exchanges cannot deadlock. Rounds are numbered
// r = 0 .. R/2-1 across levels (round 0 is level 1's KV exchange, rounds
// 2^(i-2) .. 2^(i-1)-1 are level i's).
//
// Memory. Every received or computed buffer is drawn from a slot ring of its
// purpose (received KV, received query sets, partials computed on them,
// partials of our own data that came home), one ring per purpose shared by all
// query sets, so a slot is written again only once its previous content has
// been computed on, sent home or folded. Returned partials are folded straight
// into the accumulators on the compute stream (no separate receive
// accumulator), and a query set is exchanged, computed and returned one set at
// a time. The slot counts (rm_schedule in charm.cpp) keep the peak within 1.5x of ring's.
//
// Order. The run is a set of units, each one step of every rank (an exchange,
// the computation of one item, its returns, the folds of what came home), and
// each stream takes its units in a fixed order: exchanges round by round, one
// query set after the other; on the compute stream, the query items of each
// round and its KV item at a fixed place among them; the returns follow their
// computations; a fold follows the next computation after its return, so that
// the partial has that long to come home before the compute stream waits for it.
// Dependencies follow from the buffers (PlanBuilder) and the slots.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/rm_plus.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

// ---- the units and the order of each stream
void RmPlus::plan_units() {
  CHARM_ASSERT((1 << log2_exact(size())) == size(), "an RM+ run needs a power-of-two group");
  CHARM_ASSERT(!sched_.shared_arrivals || sched_.kv_lag <= 0, "a shared return slot needs a dK/dV partial home first");
  rounds_ = size() / 2;  // a group of one only computes its local block
  sets_ = 0;
  for (const auto& x : g_) sets_ = std::max(sets_, int(x.queries.size()));
  const int items = std::max(0, rounds_ - 1) * sets_;
  auto per_rank = [&](int n) {
    return std::vector<std::vector<BufferId>>(g_.size(), std::vector<BufferId>(std::size_t(n), kNone));
  };
  kv_in_ = kv_part_ = kv_home_ = per_rank(rounds_);
  q_in_ = q_part_ = q_home_ = per_rank(items);
  kv_compute_.assign(std::size_t(rounds_), -1);
  kv_return_ = kv_fold_ = kv_compute_;
  q_compute_.assign(std::size_t(items), -1);
  q_return_ = q_fold_ = q_compute_;
  auto add = [&](std::vector<int>& stream, Kind k, int r, int j, int after) {
    units_.push_back({k, r, j, after});
    stream.push_back(int(units_.size()) - 1);
    return int(units_.size()) - 1;
  };
  std::vector<int> kv_exchange(static_cast<std::size_t>(rounds_), -1), q_exchange(static_cast<std::size_t>(items), -1);
  for (int r = 0; r < rounds_; ++r) {
    kv_exchange[std::size_t(r)] = add(kv_stream_, Kind::KvExchange, r, 0, -1);
    for (int k = 0; r > 0 && k < sets_; ++k)
      q_exchange[item(r, set_at(k))] = add(q_stream_, Kind::QExchange, r, set_at(k), -1);
  }
  // Compute stream. The local block of the own set comes first; the crossed
  // sets' local block waits until the first round's query items are computed
  // (the crossed sets arrive over the slow link while the first exchanges run),
  // unless the run has no second round, where it would come last and hold the
  // crossed results back from going home.
  const bool crossed_local_later = sets_ > 1 && items > sets_;
  add(compute_stream_, Kind::Local, 0, crossed_local_later ? 0 : -1, -1);
  std::vector<int> pending;  // returns whose folds are not placed yet
  auto fold_pending = [&] {
    for (int ret : pending) {
      const Unit u = units_[std::size_t(ret)];
      if (u.kind == Kind::KvReturn)
        kv_fold_[std::size_t(u.round)] = add(compute_stream_, Kind::KvFold, u.round, 0, ret);
      else
        q_fold_[item(u.round, u.set)] = add(compute_stream_, Kind::QFold, u.round, u.set, ret);
    }
    pending.clear();
  };
  auto kv_item = [&](int r) {
    const int c = kv_compute_[std::size_t(r)] =
        add(compute_stream_, Kind::KvCompute, r, 0, kv_exchange[std::size_t(r)]);
    fold_pending();
    if (!fwd()) pending.push_back(kv_return_[std::size_t(r)] = add(out_stream_, Kind::KvReturn, r, 0, c));
  };
  auto q_item = [&](int r, int j) {
    const int c = q_compute_[item(r, j)] = add(compute_stream_, Kind::QCompute, r, j, q_exchange[item(r, j)]);
    fold_pending();
    pending.push_back(q_return_[item(r, j)] = add(out_stream_, Kind::QReturn, r, j, c));
  };
  int next_kv = 0;
  for (int s = 0; s < items; ++s) {
    while (next_kv < rounds_ && next_kv * sets_ + sched_.kv_lag <= s) kv_item(next_kv++);
    if (crossed_local_later && s == sets_) add(compute_stream_, Kind::Local, 0, 1, -1);
    q_item(s / sets_ + 1, set_at(s % sets_));
  }
  while (next_kv < rounds_) kv_item(next_kv++);
  fold_pending();
}

// ---- emission
// A unit is emitted once the unit it reads from is, and once every slot it
// draws from holds a buffer whose last access is emitted (the builder then
// makes the new buffer wait for all of them). Streams share no buffer but
// through those two rules, so the order in which the streams' units are
// interleaved here changes no dependency: the schedule is fixed by the stream
// orders and the slot counts alone.
void RmPlus::emit_all() {
  std::vector<std::vector<int>*> streams{&kv_stream_, &q_stream_, &compute_stream_, &out_stream_};
  std::vector<std::size_t> head(streams.size(), 0);
  for (;;) {
    bool progress = false, left = false;
    for (std::size_t i = 0; i < streams.size(); ++i) {
      auto& s = *streams[i];
      while (head[i] < s.size() && try_emit(units_[std::size_t(s[head[i]])])) {
        ++head[i];
        progress = true;
      }
      left |= head[i] < s.size();
    }
    if (!left) return;
    CHARM_ASSERT(progress, "an RM+ schedule whose slots cannot be filled in stream order");
  }
}

int RmPlus::consumer(BufferId b) const {
  if (b < 0 || std::size_t(b) < first_buffer_) return -1;  // a phantom, or not one of this run's buffers
  const std::size_t k = std::size_t(b) - first_buffer_;
  return k < consumer_.size() ? consumer_[k] : -1;
}

void RmPlus::set_consumer(BufferId b, int unit) {
  if (b < 0) return;  // a phantom's: no ring holds it, so no draw waits for its consumer
  CHARM_ASSERT(std::size_t(b) >= first_buffer_, "a consumer is set on a buffer of this run");
  const std::size_t k = std::size_t(b) - first_buffer_;
  if (consumer_.size() <= k) consumer_.resize(std::max(k + 1, 2 * consumer_.size()), -1);  // -1 past the end too
  consumer_[k] = unit;
}

bool RmPlus::can_draw(const BufferRing& ring, RankId rank) const {
  const BufferId old = ring.recyclable(rank);
  const int c = old == kNone ? -1 : consumer(old);
  return c < 0 || units_[std::size_t(c)].done;
}

bool RmPlus::try_emit(Unit& u) {
  if (u.done || (u.after >= 0 && !units_[std::size_t(u.after)].done)) return false;
  if (!can_draw_all(u)) return false;
  emit(u);
  u.done = true;
  return true;
}

bool RmPlus::kv_payload(int from, int to) const {
  const auto& qs = at(to).queries;
  return std::any_of(qs.begin(), qs.end(), [&](BufferId q) { return b_.visible(owner(q), kv_owner(from)); });
}

bool RmPlus::q_payload(int from, int to, int j) const {
  const auto& qs = at(from).queries;
  return std::size_t(j) < qs.size() && b_.visible(owner(qs[std::size_t(j)]), kv_owner(to));
}

bool RmPlus::can_draw_all(const Unit& u) {
  auto all = [&](auto&& draws_from) {
    for (int x = 0; x < size(); ++x)
      if (const BufferRing* ring = draws_from(x); ring != nullptr && !can_draw(*ring, at(x).rank)) return false;
    return true;
  };
  switch (u.kind) {
  case Kind::KvExchange:
    return all([&](int x) { return kv_payload(x ^ kv_xor(u.round), x) ? &slots_.kv : nullptr; });
  case Kind::QExchange:
    return all([&](int x) { return q_payload(x ^ q_xor(u.round), x, u.set) ? &slots_.q : nullptr; });
  case Kind::KvCompute:
    return fwd() || all([&](int x) { return kv_in(x, u.round) != kNone ? &slots_.dkv_partial : nullptr; });
  case Kind::QCompute:
    return all([&](int x) { return q_in(x, u.round, u.set) != kNone ? &slots_.partial : nullptr; });
  case Kind::KvReturn:
    return all([&](int x) {
      return kv_part_[std::size_t(x ^ kv_xor(u.round))][std::size_t(u.round)] != kNone ? &slots_.dkv_arrival()
                                                                                       : nullptr;
    });
  case Kind::QReturn:
    return all([&](int x) {
      return q_part_[std::size_t(x ^ q_xor(u.round))][item(u.round, u.set)] != kNone ? &slots_.arrival : nullptr;
    });
  default:
    return true;
  }
}

BufferId RmPlus::ship(Stream stream, BufferRing& ring, BufferId src, int to, int gsrc, int gdst) {
  const RankId dst = at(to).rank;
  const Buffer s = b_.buf(src);
  const BufferId into = b_.buffer(ring, dst, s.kind, b_.region(src), BufInit::None, s.activations_dtype);
  return b_.transfer(stream, src, dst, gsrc, gdst, {}, {}, into).dst;
}

template <class One>
void RmPlus::pairs(int mask, One one) {
  for (int x = 0; x < size(); ++x) {
    const int y = x ^ mask;
    if (y < x) continue;
    const int gx = b_.new_group(), gy = b_.new_group();
    one(x, y, gx, gy);
    one(y, x, gy, gx);
  }
}

void RmPlus::compute(BufferId q, BufferId kv, BufferId acc, BufferId dkv) {
  if (fwd())
    b_.compute_fwd(q, kv, acc);
  else
    b_.compute_bwd(q, kv, acc, dkv);
}

void RmPlus::emit(const Unit& u) {
  switch (u.kind) {
  case Kind::KvExchange:
    emit_kv_exchange(u);
    break;
  case Kind::QExchange:
    emit_q_exchange(u);
    break;
  case Kind::Local:
    emit_local(u);
    break;
  case Kind::KvCompute:
    emit_kv_compute(u);
    break;
  case Kind::QCompute:
    emit_q_compute(u);
    break;
  case Kind::KvReturn:
  case Kind::QReturn:
    emit_return(u);
    break;
  case Kind::KvFold:
  case Kind::QFold:
    emit_fold(u);
    break;
  }
}

void RmPlus::emit_kv_exchange(const Unit& u) {
  pairs(kv_xor(u.round), [&](int from, int to, int gs, int gd) {
    if (!kv_payload(from, to)) return;
    const BufferId got = ship(Stream::Kv, slots_.kv, at(from).kv, to, gs, gd);
    kv_in_[std::size_t(to)][std::size_t(u.round)] = got;
    set_consumer(got, kv_compute_[std::size_t(u.round)]);
  });
}

void RmPlus::emit_q_exchange(const Unit& u) {
  pairs(q_xor(u.round), [&](int from, int to, int gs, int gd) {
    if (!q_payload(from, to, u.set)) return;
    const BufferId got = ship(Stream::Q, slots_.q, at(from).queries[std::size_t(u.set)], to, gs, gd);
    q_in_[std::size_t(to)][item(u.round, u.set)] = got;
    set_consumer(got, q_compute_[item(u.round, u.set)]);
  });
}

void RmPlus::emit_local(const Unit& u) {
  for (int x = 0; x < size(); ++x) {
    auto& X = at(x);
    for (std::size_t j = 0; j < X.queries.size(); ++j)
      if ((u.set < 0 || (u.set == 0) == (j == 0)) && b_.visible(owner(X.queries[j]), kv_owner(x)))
        compute(X.queries[j], X.kv, X.acc[j], X.dkv);
  }
}

void RmPlus::emit_kv_compute(const Unit& u) {
  for (int x = 0; x < size(); ++x) {
    const BufferId kv = kv_in(x, u.round);
    if (kv == kNone) continue;
    auto& X = at(x);
    BufferId part = kNone;
    if (!fwd()) {
      // In the activations' dtype: it goes home once, to be added to an fp32 accumulator there, as
      // FlashAttention's backward writes dK and dV (in the dtype of K and V); the CHARM+ paper's memory
      // analysis (Appendix B) drops ring-attention's fp32 buffers for sending gradients. With it the H100
      // preset meets Table 5's CHARM+ backward within 2.5% (docs/validation.md); the ring forwards fp32 sums.
      part = b_.buffer(slots_.dkv_partial, X.rank, BufKind::Dkv, b_.region(kv), BufInit::Zero,
                       /*activations_dtype=*/true);
      kv_part_[std::size_t(x)][std::size_t(u.round)] = part;
      set_consumer(part, kv_return_[std::size_t(u.round)]);
    }
    // Crossed sets first: their accumulators go home at the end, the own one stays.
    for (int k = 0; k < sets_; ++k) {
      const auto j = std::size_t(set_at(k));
      if (j < X.queries.size() && b_.visible(owner(X.queries[j]), owner(kv))) compute(X.queries[j], kv, X.acc[j], part);
    }
  }
}

void RmPlus::emit_q_compute(const Unit& u) {
  for (int x = 0; x < size(); ++x) {
    const BufferId q = q_in(x, u.round, u.set);
    if (q == kNone) continue;
    auto& X = at(x);
    const BufferId part =
        b_.buffer(slots_.partial, X.rank, fwd() ? BufKind::Out : BufKind::Dq, b_.region(q), BufInit::Zero);
    q_part_[std::size_t(x)][item(u.round, u.set)] = part;
    set_consumer(part, q_return_[item(u.round, u.set)]);
    compute(q, X.kv, part, X.dkv);
  }
}

void RmPlus::emit_return(const Unit& u) {
  const bool kv = u.kind == Kind::KvReturn;
  const std::size_t slot = kv ? std::size_t(u.round) : item(u.round, u.set);
  auto& part = kv ? kv_part_ : q_part_;
  auto& home = kv ? kv_home_ : q_home_;
  const int fold = (kv ? kv_fold_ : q_fold_)[slot];
  pairs(kv ? kv_xor(u.round) : q_xor(u.round), [&](int from, int to, int gs, int gd) {
    const BufferId p = part[std::size_t(from)][slot];
    if (p == kNone) return;
    const BufferId got = ship(Stream::Out, kv ? slots_.dkv_arrival() : slots_.arrival, p, to, gs, gd);
    home[std::size_t(to)][slot] = got;
    set_consumer(got, fold);
  });
}

void RmPlus::emit_fold(const Unit& u) {
  const bool kv = u.kind == Kind::KvFold;
  const std::size_t slot = kv ? std::size_t(u.round) : item(u.round, u.set);
  for (int x = 0; x < size(); ++x) {
    const BufferId got = (kv ? kv_home_ : q_home_)[std::size_t(x)][slot];
    if (got == kNone) continue;
    auto& X = at(x);
    if (kv)
      b_.accumulate(Stream::Compute, got, X.dkv);
    else if (fwd())
      b_.merge(Stream::Compute, got, X.acc[std::size_t(u.set)]);
    else
      b_.accumulate(Stream::Compute, got, X.acc[std::size_t(u.set)]);
  }
}

}  // namespace charm::sched::detail
