// RM+ (paper Section 3.2) and CHARM+ (Section 3.3).
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
// CHARM+ over D domains x R ranks, rank (d, l):
//
//   cross:  Q(d,l) -> (d-p, l) for p = 1 .. D-1, back to back at the start
//           (KV never leaves its domain)
//   run:    one RM+ run per domain whose ranks carry D query sets: their own
//           and the ones that crossed (Algorithm 2's q and q_cross); a crossed
//           set is computed once it has arrived, KV moves inside the domain once
//   end:    (O, LSE) of foreign queries go back to (d+p, l) and are merged,
//           so cross-domain traffic is confined to the start and the end.
// Backward mirrors it with the bundle (Q, dO, LSE, D) crossing once and dQ
// partials returning; dK/dV partials move only inside a domain.
//
// Memory. Every received or computed buffer is drawn from a slot ring of its
// purpose (received KV, received query sets, partials computed on them,
// partials of our own data that came home), one ring per purpose shared by all
// query sets, so a slot is written again only once its previous content has
// been computed on, sent home or folded. Returned partials are folded straight
// into the accumulators on the compute stream (no separate receive
// accumulator), and a query set is exchanged, computed and returned one set at
// a time. The slot counts (rm_schedule) keep the peak within 1.5x of ring's.
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
#include <bit>

#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

/// The bounded buffers of one RM+ pass and where its KV items go on the compute stream.
struct RmSchedule {
  int kv_slots = 1;           // received KV
  int q_slots = 1;            // received query sets (Q or bundles), shared by every query set
  int partial_slots = 1;      // partials (O or dQ) computed on received queries, until sent home
  int arrival_slots = 1;      // partials of our queries that came home, until folded
  int dkv_partial_slots = 1;  // backward: dK/dV partials computed on received KV, until sent home
  int dkv_arrival_slots = 1;  // backward: dK/dV partials of our KV that came home, until folded
  // Backward: dQ and dK/dV partials that come home share one slot (they arrive
  // one after the other on the out stream). Its storage is that of the first
  // arrival, so the KV item of round 0 is computed before any query item (kv_lag
  // <= 0) and its dK/dV partial comes home first. (A dK/dV partial travels in the
  // dtype, as the backward kernel writes it: as large as an fp32 dQ partial without
  // GQA; with GQA a dQ arrival is larger and starts a chain of its own. A rank that a
  // mask leaves without a dK/dV partial has a dQ arrival first.)
  bool shared_arrivals = false;
  // The KV item of round r is computed just before query item r * sets + kv_lag
  // (query items count over rounds 1, 2, ...; 0: after the round's own query
  // items; negative: among them; positive: after some of the next round's).
  int kv_lag = 0;
};

/// Slot counts keep the peak within 1.5x of ring's on two domains (docs/validation.md
/// section 4); the lags were chosen by simulating the paper's workload on the h100-2x8
/// preset and checked on other sizes, masks, domain counts and presets. RM+ keeps two
/// KV slots (the KV stream may run a round ahead). CHARM+ also holds the crossed query
/// sets and their accumulators, so it keeps one slot of each purpose forward; backward
/// it shares the return slot between dQ and dK/dV partials and spends what that saves
/// on a second dQ partial slot, so that a query item can be computed while the
/// previous one's partial is still going home (the returns carry most of the
/// backward's bytes, and their stream is the one that must not wait). With more than
/// two domains the fixed part grows anyway, and a second query slot lets the next of
/// a round's many query sets travel while one is computed.
RmSchedule rm_schedule(Phase phase, int domains) {
  RmSchedule s;
  if (domains == 1) {
    s.kv_slots = 2;
    s.kv_lag = phase == Phase::Fwd ? 1 : 0;
  } else if (phase == Phase::Fwd) {
    s.kv_lag = -1;
  } else {
    s.partial_slots = 2;
    s.shared_arrivals = true;
    s.kv_lag = 0;
    if (domains > 2) s.q_slots = 2;
  }
  return s;
}

/// Bounded in-flight buffers of the RM+ runs of one pass (one ring per purpose
/// and rank, shared by every query set; the runs of a pass share them too).
struct RmSlots {
  RmSlots(int ranks, const RmSchedule& s)
      : kv(ranks, s.kv_slots), q(ranks, s.q_slots), partial(ranks, s.partial_slots), arrival(ranks, s.arrival_slots),
        dkv_partial(ranks, s.dkv_partial_slots), dkv_arrival_own(ranks, s.dkv_arrival_slots),
        shared(s.shared_arrivals) {}
  BufferRing kv, q, partial, arrival, dkv_partial, dkv_arrival_own;
  bool shared;
  BufferRing& dkv_arrival() { return shared ? arrival : dkv_arrival_own; }
};

/// One rank's part of an RM+ run.
struct RmRank {
  RankId rank = 0;
  BufferId kv = kNone;            // the rank's own KV
  std::vector<BufferId> queries;  // Q (fwd) or QBundle (bwd) buffers, one per query set (own first)
  std::vector<BufferId> acc;      // fwd: Out acc; bwd: Dq acc, per query set
  BufferId dkv = kNone;           // bwd: own dK/dV acc
};

class RmPlus {
 public:
  RmPlus(PlanBuilder& b, std::vector<RmRank>& g, RmSlots& slots, const RmSchedule& schedule)
      : b_(b), g_(g), slots_(slots), sched_(schedule), first_buffer_(b.num_buffers()) {}

  void run() {
    plan_units();
    emit_all();
  }

 private:
  enum class Kind : std::uint8_t {
    KvExchange,
    QExchange,
    Local,
    KvCompute,
    QCompute,
    KvReturn,
    QReturn,
    KvFold,
    QFold
  };
  struct Unit {
    Kind kind;
    int round = 0;   // KV round r (every round r >= 1 also exchanges query sets)
    int set = 0;     // query set (QExchange .. QFold); Local: -1 all sets, 0 own, 1 crossed
    int after = -1;  // the unit whose output this one reads
    bool done = false;
  };

  [[nodiscard]] bool fwd() const { return b_.phase() == Phase::Fwd; }
  [[nodiscard]] int size() const { return static_cast<int>(g_.size()); }
  [[nodiscard]] RmRank& at(int x) { return g_[std::size_t(x)]; }
  [[nodiscard]] const RmRank& at(int x) const { return g_[std::size_t(x)]; }
  [[nodiscard]] RankId owner(BufferId b) const { return b_.buf(b).owner; }
  [[nodiscard]] RankId kv_owner(int x) const { return owner(at(x).kv); }
  /// 2^(i-2) for a round r >= 1 of level i.
  static int level_base(int r) { return int(std::bit_floor(unsigned(r))); }
  static int kv_xor(int r) { return r == 0 ? 1 : r + level_base(r); }  // 2^(i-1) + t
  static int q_xor(int r) { return r + 2 * level_base(r); }            // 2^(i-1) + 2^(i-2) + t
  /// Index of query set j of round r >= 1 among all query items.
  [[nodiscard]] std::size_t item(int r, int j) const { return std::size_t((r - 1) * sets_ + j); }
  /// The k-th query set a round exchanges (and a KV item computes): the crossed
  /// sets first, in the order they arrived and go home, so that their results are
  /// complete early and can go home while the own set finishes.
  [[nodiscard]] int set_at(int k) const { return (k + 1) % sets_; }

  // ---- the units and the order of each stream
  void plan_units() {
    CHARM_ASSERT((1 << log2_exact(size())) == size(), "an RM+ run needs a power-of-two group");
    CHARM_ASSERT(!sched_.shared_arrivals || sched_.kv_lag <= 0,
                 "a shared return slot needs a dK/dV partial home first");
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
    std::vector<int> kv_exchange(static_cast<std::size_t>(rounds_), -1),
        q_exchange(static_cast<std::size_t>(items), -1);
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
  void emit_all() {
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

  /// The unit that last reads buffer b (-1: none known).
  [[nodiscard]] int consumer(BufferId b) const {
    if (b < 0 || std::size_t(b) < first_buffer_) return -1;  // a phantom, or not one of this run's buffers
    const std::size_t k = std::size_t(b) - first_buffer_;
    return k < consumer_.size() ? consumer_[k] : -1;
  }
  void set_consumer(BufferId b, int unit) {
    if (b < 0) return;  // a phantom's: no ring holds it, so no draw waits for its consumer
    CHARM_ASSERT(std::size_t(b) >= first_buffer_, "a consumer is set on a buffer of this run");
    const std::size_t k = std::size_t(b) - first_buffer_;
    if (consumer_.size() <= k) consumer_.resize(std::max(k + 1, 2 * consumer_.size()), -1);  // -1 past the end too
    consumer_[k] = unit;
  }
  /// Whether `rank` may draw from `ring` now: the storage it would take over is done with.
  [[nodiscard]] bool can_draw(const BufferRing& ring, RankId rank) const {
    const BufferId old = ring.recyclable(rank);
    const int c = old == kNone ? -1 : consumer(old);
    return c < 0 || units_[std::size_t(c)].done;
  }

  bool try_emit(Unit& u) {
    if (u.done || (u.after >= 0 && !units_[std::size_t(u.after)].done)) return false;
    if (!can_draw_all(u)) return false;
    emit(u);
    u.done = true;
    return true;
  }

  /// What `from` sends `to` in a KV exchange: its KV if some query of `to` can see it.
  [[nodiscard]] bool kv_payload(int from, int to) const {
    const auto& qs = at(to).queries;
    return std::any_of(qs.begin(), qs.end(), [&](BufferId q) { return b_.visible(owner(q), kv_owner(from)); });
  }
  /// Whether `from` sends its query set j to `to` (the KV of `to` can serve it).
  [[nodiscard]] bool q_payload(int from, int to, int j) const {
    const auto& qs = at(from).queries;
    return std::size_t(j) < qs.size() && b_.visible(owner(qs[std::size_t(j)]), kv_owner(to));
  }

  [[nodiscard]] bool can_draw_all(const Unit& u) {
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

  [[nodiscard]] BufferId kv_in(int x, int r) const { return kv_in_[std::size_t(x)][std::size_t(r)]; }
  [[nodiscard]] BufferId q_in(int x, int r, int j) const { return q_in_[std::size_t(x)][item(r, j)]; }

  /// Sends `src` to g_[to] into a buffer drawn from `ring` there.
  BufferId ship(Stream stream, BufferRing& ring, BufferId src, int to, int gsrc, int gdst) {
    const RankId dst = at(to).rank;
    const Buffer s = b_.buf(src);
    const BufferId into = b_.buffer(ring, dst, s.kind, b_.region(src), BufInit::None, s.activations_dtype);
    return b_.transfer(stream, src, dst, gsrc, gdst, {}, {}, into).dst;
  }

  /// Both directions between x and x ^ mask as one ncclGroup on each side; one(from, to, gsrc, gdst) sends one way.
  template <class One>
  void pairs(int mask, One one) {
    for (int x = 0; x < size(); ++x) {
      const int y = x ^ mask;
      if (y < x) continue;
      const int gx = b_.new_group(), gy = b_.new_group();
      one(x, y, gx, gy);
      one(y, x, gy, gx);
    }
  }

  void compute(BufferId q, BufferId kv, BufferId acc, BufferId dkv) {
    if (fwd())
      b_.compute_fwd(q, kv, acc);
    else
      b_.compute_bwd(q, kv, acc, dkv);
  }

  void emit(const Unit& u) {
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
  void emit_kv_exchange(const Unit& u) {
    pairs(kv_xor(u.round), [&](int from, int to, int gs, int gd) {
      if (!kv_payload(from, to)) return;
      const BufferId got = ship(Stream::Kv, slots_.kv, at(from).kv, to, gs, gd);
      kv_in_[std::size_t(to)][std::size_t(u.round)] = got;
      set_consumer(got, kv_compute_[std::size_t(u.round)]);
    });
  }
  void emit_q_exchange(const Unit& u) {
    pairs(q_xor(u.round), [&](int from, int to, int gs, int gd) {
      if (!q_payload(from, to, u.set)) return;
      const BufferId got = ship(Stream::Q, slots_.q, at(from).queries[std::size_t(u.set)], to, gs, gd);
      q_in_[std::size_t(to)][item(u.round, u.set)] = got;
      set_consumer(got, q_compute_[item(u.round, u.set)]);
    });
  }
  void emit_local(const Unit& u) {
    for (int x = 0; x < size(); ++x) {
      auto& X = at(x);
      for (std::size_t j = 0; j < X.queries.size(); ++j)
        if ((u.set < 0 || (u.set == 0) == (j == 0)) && b_.visible(owner(X.queries[j]), kv_owner(x)))
          compute(X.queries[j], X.kv, X.acc[j], X.dkv);
    }
  }
  void emit_kv_compute(const Unit& u) {
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
        if (j < X.queries.size() && b_.visible(owner(X.queries[j]), owner(kv)))
          compute(X.queries[j], kv, X.acc[j], part);
      }
    }
  }
  void emit_q_compute(const Unit& u) {
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
  void emit_return(const Unit& u) {
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
  void emit_fold(const Unit& u) {
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

  PlanBuilder& b_;
  std::vector<RmRank>& g_;
  RmSlots& slots_;
  RmSchedule sched_;
  int rounds_ = 0, sets_ = 0;
  std::vector<Unit> units_;
  std::vector<int> kv_stream_, q_stream_, compute_stream_, out_stream_;
  std::size_t first_buffer_;   // buffers created before this run have no consumer here
  std::vector<int> consumer_;  // by BufferId - first_buffer_: the unit that last reads it
  // Unit ids by KV round and by query item.
  std::vector<int> kv_compute_, kv_return_, kv_fold_, q_compute_, q_return_, q_fold_;
  // Per local rank, by KV round or query item: what arrived, the partial computed on it, what came home.
  std::vector<std::vector<BufferId>> kv_in_, kv_part_, kv_home_, q_in_, q_part_, q_home_;
};

/// CHARM+ over `domains` domains of R ranks each: queries cross between domains
/// first, one RM+ run per domain, the foreign results go home at the end.
class CharmPass {
 public:
  CharmPass(PlanBuilder& b, const std::vector<RankState>& st, int domains)
      : b_(b), st_(st), domains_(domains), fwd_(b.phase() == Phase::Fwd), n_(b.ranks()), R_(n_ / domains),
        N_(std::size_t(n_)), acc_kind_(fwd_ ? BufKind::Out : BufKind::Dq) {}

  void run() {
    std::vector<BufferId> own_acc(N_), dkv(N_, kNone);
    for (std::size_t r = 0; r < N_; ++r) {
      own_acc[r] = b_.buffer(RankId(r), acc_kind_, RankId(r), BufInit::Zero);
      if (!fwd_) dkv[r] = b_.buffer(RankId(r), BufKind::Dkv, RankId(r), BufInit::Zero);
    }
    const auto crossed = cross_queries();
    const auto foreign_acc = run_domains(crossed, own_acc, dkv);
    return_home(foreign_acc, own_acc);
    for (std::size_t r = 0; r < N_; ++r) {
      if (fwd_) {
        b_.results(RankId(r)).out = own_acc[r];
      } else {
        b_.results(RankId(r)).dq = own_acc[r];
        b_.results(RankId(r)).dkv = dkv[r];
      }
    }
  }

 private:
  RankId rank_of(int d, int l) const { return RankId(((d % domains_ + domains_) % domains_) * R_ + l); }
  BufferId query_of(std::size_t r) const { return fwd_ ? st_[r].q : st_[r].qbundle; }
  // A query set crosses only if some key of the destination domain can see it.
  bool domain_needs(RankId q_owner, int d) const {
    for (int l = 0; l < R_; ++l)
      if (b_.visible(q_owner, rank_of(d, l))) return true;
    return false;
  }

  // Cross round p (1 .. D-1): (d, l) sends its queries to (d-p, l) and receives
  // (d+p, l)'s. All rounds go at the start, back to back, and the run computes
  // a crossed query set once it has arrived (Algorithm 2's q_cross).
  std::vector<std::vector<BufferId>> cross_queries() {
    std::vector<std::vector<BufferId>> crossed(N_, std::vector<BufferId>(std::size_t(domains_), kNone));
    for (int p = 1; p < domains_; ++p) {
      std::vector<int> group(N_);
      for (auto& gid : group) gid = b_.new_group();
      for (int d = 0; d < domains_; ++d)
        for (int l = 0; l < R_; ++l) {
          const RankId src = rank_of(d, l), dst = rank_of(d - p, l);
          if (!domain_needs(src, (d - p + domains_) % domains_)) continue;
          auto t = b_.transfer(Stream::Cross, query_of(std::size_t(src)), dst, group[std::size_t(src)],
                               group[std::size_t(dst)]);
          crossed[std::size_t(dst)][std::size_t(p)] = t.dst;
        }
    }
    return crossed;
  }

  // One RM+ run per domain over every query set its ranks hold: their own and
  // the crossed ones, so KV moves inside the domain once. Returns the crossed sets' accumulators.
  std::vector<std::vector<BufferId>> run_domains(const std::vector<std::vector<BufferId>>& crossed,
                                                 const std::vector<BufferId>& own_acc,
                                                 const std::vector<BufferId>& dkv) {
    const RmSchedule schedule = rm_schedule(b_.phase(), domains_);
    RmSlots slots(n_, schedule);
    std::vector<std::vector<BufferId>> foreign_acc(N_, std::vector<BufferId>(std::size_t(domains_), kNone));
    for (int d = 0; d < domains_; ++d) {
      std::vector<RmRank> g(static_cast<std::size_t>(R_));
      for (int l = 0; l < R_; ++l) {
        const auto r = std::size_t(rank_of(d, l));
        RmRank& x = g[std::size_t(l)];
        x.rank = RankId(r);
        x.kv = st_[r].kv;
        x.dkv = dkv[r];
        x.queries.push_back(query_of(r));
        x.acc.push_back(own_acc[r]);
        for (int p = 1; p < domains_; ++p) {
          const BufferId q = crossed[r][std::size_t(p)];
          if (q == kNone) continue;
          x.queries.push_back(q);
          foreign_acc[r][std::size_t(p)] = b_.buffer(RankId(r), acc_kind_, b_.buf(q).owner, BufInit::Zero);
          x.acc.push_back(foreign_acc[r][std::size_t(p)]);
        }
      }
      RmPlus(b_, g, slots, schedule).run();
    }
    return foreign_acc;
  }

  // Foreign results go home at the end: round p, (d, l) returns (d+p, l)'s
  // partial. The first to arrive becomes the sum of all that come home; the
  // later rounds land in one slot of their own and are merged into it on the
  // cross stream (every transfer of a round first: a merge between a rank's
  // receive and send would split its ncclGroup), so that the next round need
  // not wait for the compute stream. The sum joins the accumulator at the end.
  void return_home(const std::vector<std::vector<BufferId>>& foreign_acc, const std::vector<BufferId>& own_acc) {
    std::vector<BufferId> home(N_, kNone);
    BufferRing cross_home(n_, 1);
    for (int p = 1; p < domains_; ++p) {
      std::vector<int> group(N_);
      for (auto& gid : group) gid = b_.new_group();
      std::vector<std::pair<RankId, BufferId>> arrived;
      for (std::size_t r = 0; r < N_; ++r) {
        const BufferId part = foreign_acc[r][std::size_t(p)];
        if (part == kNone) continue;
        const RankId owner = b_.buf(part).owner;
        const bool first = home[std::size_t(owner)] == kNone;
        const BufferId into = first ? kNone : b_.buffer(cross_home, owner, acc_kind_, b_.region(part), BufInit::None);
        const BufferId got =
            b_.transfer(Stream::Cross, part, owner, group[r], group[std::size_t(owner)], {}, {}, into).dst;
        if (first)
          home[std::size_t(owner)] = got;
        else
          arrived.emplace_back(owner, got);
      }
      for (auto [owner, partial] : arrived) {
        if (fwd_)
          b_.merge(Stream::Cross, partial, home[std::size_t(owner)]);
        else
          b_.accumulate(Stream::Cross, partial, home[std::size_t(owner)]);
      }
    }
    for (std::size_t r = 0; r < N_; ++r) {
      if (home[r] == kNone) continue;
      if (fwd_)
        b_.merge(Stream::Compute, home[r], own_acc[r]);
      else
        b_.accumulate(Stream::Compute, home[r], own_acc[r]);
    }
  }

  PlanBuilder& b_;
  const std::vector<RankState>& st_;
  int domains_;
  bool fwd_;
  int n_, R_;
  std::size_t N_;
  BufKind acc_kind_;
};

void charm_pass(PlanBuilder& b, const std::vector<RankState>& st, int domains) { CharmPass(b, st, domains).run(); }

}  // namespace

void charm_forward(PlanBuilder& b, const std::vector<RankState>& st, int domains) { charm_pass(b, st, domains); }
void charm_backward(PlanBuilder& b, const std::vector<RankState>& st, int domains) { charm_pass(b, st, domains); }

}  // namespace charm::sched::detail
