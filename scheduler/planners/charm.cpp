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
// matching, so the paired exchanges cannot deadlock. A level's data is
// computed as it arrives; the last round's items are deferred to the next
// level, and level i's exchange starts once level i-1's computation is done
// (the Commwait of Algorithm 2).
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
// Buffers in flight are bounded: two slots for received KV, two per query
// set for received queries, one per query set for the partials computed on
// them (free once sent home) and for returned partials (folded at once), one
// for dK/dV partials. A round's exchange is emitted after the round before the
// previous one is computed, so a slot is written again only once its old
// content is computed on and sent.

#include <algorithm>

#include "scheduler/planners/comm_list.hpp"
#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

/// Bounded in-flight buffers of the RM+ runs of one pass (shared by the pipelines).
struct RmSlots {
  RmSlots(int ranks, int query_sets)
      : kv(ranks, 2), dkv_partial(ranks, 1), dkv_arrival(ranks, 1) {
    for (int j = 0; j < query_sets; ++j) {
      q.emplace_back(ranks, 2);
      partial.emplace_back(ranks, 1);
      arrival.emplace_back(ranks, 1);
    }
  }
  BufferRing kv, dkv_partial, dkv_arrival;
  std::vector<BufferRing> q, partial, arrival;  // per query set of a run
};

/// One rank's part of an RM+ run.
struct RmRank {
  RankId rank = 0;
  BufferId kv = kNone;               // the rank's own KV
  std::vector<BufferId> queries;     // Q (fwd) or QBundle (bwd) buffers, one per query owner
  std::vector<BufferId> acc;         // fwd: Out acc; bwd: Dq acc (compute stream), per query
  std::vector<BufferId> racc;        // returned partials are folded here (out stream), lazily
  BufferId dkv = kNone, rdkv = kNone;  // bwd: own dK/dV acc and its returned-partials twin
};

class RmPlus {
 public:
  RmPlus(PlanBuilder& b, std::vector<RmRank>& g, RmSlots& slots) : b_(b), g_(g), slots_(slots) {}

  void run() {
    const int R = static_cast<int>(g_.size());
    const int levels = log2_exact(R);
    last_compute_.assign(g_.size(), kNone);
    std::vector<Item> deferred;
    for (int x = 0; x < R; ++x) deferred.push_back({Item::Local, x, kNone, {}, {}});
    for (int level = 1; level <= levels; ++level) {
      const int rounds = level == 1 ? 1 : 1 << (level - 2);
      const auto barrier = last_compute_;
      std::vector<std::vector<Item>> round_items(static_cast<std::size_t>(rounds));
      auto exchange_round = [&](int t) {
        const bool first = t == 0;
        const int kv_xor = level == 1 ? 1 : (1 << (level - 1)) + t;
        exchange(Item::Kv, kv_xor, first ? &barrier : nullptr, round_items[std::size_t(t)]);
        if (level >= 2) {
          const int q_xor = (1 << (level - 1)) + (1 << (level - 2)) + t;
          exchange(Item::Q, q_xor, first ? &barrier : nullptr, round_items[std::size_t(t)]);
        }
      };
      // Compute what the previous level left, then every round but the last.
      // Each stream keeps the order it always had (exchanges round by round,
      // computes item by item); emitting round t's exchange after round t-2's
      // compute only lets round t's buffers take over round t-2's slots.
      exchange_round(0);
      compute(deferred);
      for (int t = 1; t < rounds; ++t) {
        exchange_round(t);
        compute(round_items[std::size_t(t - 1)]);
      }
      deferred = std::move(round_items.back());
    }
    compute(deferred);
  }

 private:
  struct Item {
    enum Kind { Local, Kv, Q } kind;
    int x;            // local index that computes
    int peer;         // local index of the partner (Kv: KV owner; Q: query owner)
    std::vector<BufferId> bufs;  // Kv: the received KV; Q: the received query buffers
    std::vector<int> sets;       // Q: the query set (index in the owner's queries) of each buffer
  };

  [[nodiscard]] bool fwd() const { return b_.phase() == Phase::Fwd; }
  [[nodiscard]] RankId kv_owner(int x) const { return b_.buf(g_[std::size_t(x)].kv).owner; }
  [[nodiscard]] bool any_visible(const std::vector<BufferId>& qs, RankId kv) const {
    return std::any_of(qs.begin(), qs.end(), [&](BufferId q) { return b_.visible(b_.buf(q).owner, kv); });
  }
  static std::vector<OpId> barrier_of(const std::vector<OpId>* barrier, int x) {
    if (barrier == nullptr || (*barrier)[std::size_t(x)] == kNone) return {};
    return {(*barrier)[std::size_t(x)]};
  }

  /// What `from` sends `to` in an exchange, as indices into `from`'s data: its
  /// KV (index 0) if some query of `to` can see it; the query sets of `from`
  /// that the KV of `to` can serve.
  [[nodiscard]] std::vector<int> payload(typename Item::Kind kind, const RmRank& from, const RmRank& to) const {
    if (kind == Item::Kv) {
      if (any_visible(to.queries, b_.buf(from.kv).owner)) return {0};
      return {};
    }
    std::vector<int> sets;
    for (std::size_t j = 0; j < from.queries.size(); ++j)
      if (b_.visible(b_.buf(from.queries[j]).owner, b_.buf(to.kv).owner)) sets.push_back(int(j));
    return sets;
  }

  /// Sends `from`'s item k (its KV, or query set k) to `to` into a slot of `to`.
  void ship(typename Item::Kind kind, const RmRank& from, const RmRank& to, int k, int gsrc, int gdst,
            const std::vector<OpId>& es, const std::vector<OpId>& ed, Item& at_to) {
    const BufferId src = kind == Item::Kv ? from.kv : from.queries[std::size_t(k)];
    BufferRing& ring = kind == Item::Kv ? slots_.kv : slots_.q[std::size_t(k)];
    const BufferId into = b_.buffer(ring, to.rank, b_.buf(src).kind, b_.region(src), BufInit::None);
    const Stream stream = kind == Item::Kv ? Stream::Kv : Stream::Q;
    at_to.bufs.push_back(b_.transfer(stream, src, to.rank, gsrc, gdst, es, ed, into).dst);
    at_to.sets.push_back(k);
  }

  /// One round of paired exchanges (KV on the kv stream, Q on the q stream),
  /// partner x ^ xor_mask, both directions one ncclGroup per side.
  void exchange(typename Item::Kind kind, int xor_mask, const std::vector<OpId>* barrier, std::vector<Item>& items) {
    const int R = static_cast<int>(g_.size());
    for (int x = 0; x < R; ++x) {
      const int y = x ^ xor_mask;
      if (y < x) continue;
      auto& X = g_[std::size_t(x)];
      auto& Y = g_[std::size_t(y)];
      const int gx = b_.new_group(), gy = b_.new_group();
      const auto ex = barrier_of(barrier, x), ey = barrier_of(barrier, y);
      Item at_y{kind, y, x, {}, {}}, at_x{kind, x, y, {}, {}};
      for (int k : payload(kind, X, Y)) ship(kind, X, Y, k, gx, gy, ex, ey, at_y);
      for (int k : payload(kind, Y, X)) ship(kind, Y, X, k, gy, gx, ey, ex, at_x);
      if (!at_y.bufs.empty()) items.push_back(std::move(at_y));
      if (!at_x.bufs.empty()) items.push_back(std::move(at_x));
    }
  }

  void note(int x, OpId op) { last_compute_[std::size_t(x)] = op; }

  // Computes the items of one round (or the deferred ones). Partials travel
  // back to their owners in one group per pair and side, so returns match up
  // in the same order on both ends.
  void compute(std::vector<Item>& items) {
    // Foreign queries first: their partials can travel while local work goes on.
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return (a.kind == Item::Q) > (b.kind == Item::Q);
    });
    struct Return { int from, to; std::vector<BufferId> partials; std::vector<int> sets; };
    std::vector<Return> returns;
    for (Item& it : items) {
      auto& X = g_[std::size_t(it.x)];
      switch (it.kind) {
        case Item::Local:
          for (std::size_t j = 0; j < X.queries.size(); ++j) {
            if (!b_.visible(b_.buf(X.queries[j]).owner, kv_owner(it.x))) continue;
            note(it.x, fwd() ? b_.compute_fwd(X.queries[j], X.kv, X.acc[j])
                             : b_.compute_bwd(X.queries[j], X.kv, X.acc[j], X.dkv));
          }
          break;
        case Item::Kv: {
          const BufferId kv = it.bufs[0];
          BufferId dkvp = fwd() ? kNone : b_.buffer(slots_.dkv_partial, X.rank, BufKind::Dkv, b_.buf(kv).owner, BufInit::Zero);
          for (std::size_t j = 0; j < X.queries.size(); ++j) {
            if (!b_.visible(b_.buf(X.queries[j]).owner, b_.buf(kv).owner)) continue;
            note(it.x, fwd() ? b_.compute_fwd(X.queries[j], kv, X.acc[j])
                             : b_.compute_bwd(X.queries[j], kv, X.acc[j], dkvp));
          }
          if (!fwd()) returns.push_back({it.x, it.peer, {dkvp}, {-1}});
          break;
        }
        case Item::Q: {
          Return ret{it.x, it.peer, {}, {}};
          for (std::size_t k = 0; k < it.bufs.size(); ++k) {
            const BufferId q = it.bufs[k];
            const RankId owner = b_.buf(q).owner;
            BufferRing& ring = slots_.partial[std::size_t(it.sets[k])];
            const BufferId part = b_.buffer(ring, X.rank, fwd() ? BufKind::Out : BufKind::Dq, owner, BufInit::Zero);
            note(it.x, fwd() ? b_.compute_fwd(q, X.kv, part) : b_.compute_bwd(q, X.kv, part, X.dkv));
            ret.partials.push_back(part);
            ret.sets.push_back(it.sets[k]);
          }
          returns.push_back(std::move(ret));
          break;
        }
      }
    }
    send_returns(returns);
  }

  template <class Returns>
  void send_returns(Returns& returns) {
    // Pair up the two directions between the same ranks into one group each side.
    std::vector<char> done(returns.size(), 0);
    for (std::size_t i = 0; i < returns.size(); ++i) {
      if (done[i]) continue;
      done[i] = 1;
      std::size_t j = returns.size();
      for (std::size_t k = i + 1; k < returns.size(); ++k)
        if (!done[k] && returns[k].from == returns[i].to && returns[k].to == returns[i].from) { j = k; break; }
      const int ga = b_.new_group(), gb = b_.new_group();
      std::vector<std::pair<BufferId, int>> arrivals;  // (received buffer, local index)
      auto send_home = [&](auto& ret, int gsrc, int gdst) {
        const RankId to = g_[std::size_t(ret.to)].rank;
        for (std::size_t k = 0; k < ret.partials.size(); ++k) {
          const BufferId p = ret.partials[k];
          BufferRing& ring = ret.sets[k] < 0 ? slots_.dkv_arrival : slots_.arrival[std::size_t(ret.sets[k])];
          const BufferId into = b_.buffer(ring, to, b_.buf(p).kind, b_.region(p), BufInit::None);
          arrivals.emplace_back(b_.transfer(Stream::Out, p, to, gsrc, gdst, {}, {}, into).dst, ret.to);
        }
      };
      send_home(returns[i], ga, gb);
      if (j < returns.size()) {
        done[j] = 1;
        send_home(returns[j], gb, ga);
      }
      for (auto [buf, x] : arrivals) fold_return(x, buf);
    }
  }

  void fold_return(int x, BufferId partial) {
    auto& X = g_[std::size_t(x)];
    const Buffer pb = b_.buf(partial);
    if (pb.kind == BufKind::Dkv) {
      if (X.rdkv == kNone) X.rdkv = b_.buffer(X.rank, BufKind::Dkv, pb.owner, BufInit::Zero);
      b_.accumulate(Stream::Out, partial, X.rdkv);
      return;
    }
    for (std::size_t j = 0; j < X.queries.size(); ++j) {
      if (b_.buf(X.queries[j]).owner != pb.owner) continue;
      if (X.racc[j] == kNone) X.racc[j] = b_.buffer(X.rank, pb.kind, pb.owner, BufInit::Zero);
      if (fwd()) b_.merge(Stream::Out, partial, X.racc[j]);
      else b_.accumulate(Stream::Out, partial, X.racc[j]);
      return;
    }
    CHARM_ASSERT(false, "a returned partial has no query set to go to");
  }

  PlanBuilder& b_;
  std::vector<RmRank>& g_;
  RmSlots& slots_;
  std::vector<OpId> last_compute_;
};

/// Folds the returned partials of one run into the compute-stream accumulators.
void fold_query_partials(PlanBuilder& b, std::vector<RmRank>& g) {
  for (auto& x : g)
    for (std::size_t j = 0; j < x.acc.size(); ++j) {
      if (x.racc[j] == kNone) continue;
      if (b.phase() == Phase::Fwd) b.merge(Stream::Compute, x.racc[j], x.acc[j]);
      else b.accumulate(Stream::Compute, x.racc[j], x.acc[j]);
      x.racc[j] = kNone;
    }
}

void charm_pass(PlanBuilder& b, const std::vector<RankState>& st, int domains) {
  const bool fwd = b.phase() == Phase::Fwd;
  const int n = b.ranks();
  const int R = n / domains;
  const auto N = std::size_t(n);
  auto rank_of = [&](int d, int l) { return RankId(((d % domains + domains) % domains) * R + l); };
  auto acc_kind = fwd ? BufKind::Out : BufKind::Dq;
  auto query_of = [&](std::size_t r) { return fwd ? st[r].q : st[r].qbundle; };

  std::vector<BufferId> own_acc(N), dkv(N, kNone), rdkv(N, kNone), cross_racc(N, kNone);
  for (std::size_t r = 0; r < N; ++r) {
    own_acc[r] = b.buffer(RankId(r), acc_kind, RankId(r), BufInit::Zero);
    if (!fwd) dkv[r] = b.buffer(RankId(r), BufKind::Dkv, RankId(r), BufInit::Zero);
  }
  // A query set crosses only if some key of the destination domain can see it.
  auto domain_needs = [&](RankId q_owner, int d) {
    for (int l = 0; l < R; ++l)
      if (b.visible(q_owner, rank_of(d, l))) return true;
    return false;
  };
  // Cross round p (1 .. D-1): (d, l) sends its queries to (d-p, l) and receives
  // (d+p, l)'s. All rounds go at the start, back to back, and the run computes
  // a crossed query set once it has arrived (Algorithm 2's q_cross).
  std::vector<std::vector<BufferId>> crossed(N, std::vector<BufferId>(std::size_t(domains), kNone));
  for (int p = 1; p < domains; ++p) {
    std::vector<int> group(N);
    for (auto& gid : group) gid = b.new_group();
    for (int d = 0; d < domains; ++d)
      for (int l = 0; l < R; ++l) {
        const RankId src = rank_of(d, l), dst = rank_of(d - p, l);
        if (!domain_needs(src, (d - p + domains) % domains)) continue;
        auto t = b.transfer(Stream::Cross, query_of(std::size_t(src)), dst, group[std::size_t(src)], group[std::size_t(dst)]);
        crossed[std::size_t(dst)][std::size_t(p)] = t.dst;
      }
  }
  // One RM+ run per domain over every query set its ranks hold: their own and
  // the crossed ones, so KV moves inside the domain once.
  RmSlots slots(n, domains);
  std::vector<std::vector<BufferId>> foreign_acc(N, std::vector<BufferId>(std::size_t(domains), kNone));
  for (int d = 0; d < domains; ++d) {
    std::vector<RmRank> g(static_cast<std::size_t>(R));
    for (int l = 0; l < R; ++l) {
      const auto r = std::size_t(rank_of(d, l));
      RmRank& x = g[std::size_t(l)];
      x.rank = RankId(r);
      x.kv = st[r].kv;
      x.dkv = dkv[r];
      x.queries.push_back(query_of(r));
      x.acc.push_back(own_acc[r]);
      for (int p = 1; p < domains; ++p) {
        const BufferId q = crossed[r][std::size_t(p)];
        if (q == kNone) continue;
        x.queries.push_back(q);
        foreign_acc[r][std::size_t(p)] = b.buffer(RankId(r), acc_kind, b.buf(q).owner, BufInit::Zero);
        x.acc.push_back(foreign_acc[r][std::size_t(p)]);
      }
      x.racc.assign(x.queries.size(), kNone);
    }
    RmPlus(b, g, slots).run();
    fold_query_partials(b, g);
    for (int l = 0; l < R; ++l) rdkv[std::size_t(rank_of(d, l))] = g[std::size_t(l)].rdkv;
  }
  // Foreign results go home at the end: round p, (d, l) returns (d+p, l)'s
  // partial. Every transfer of a round first, then the merges: a merge between
  // a rank's receive and send would split its ncclGroup.
  for (int p = 1; p < domains; ++p) {
    std::vector<int> group(N);
    for (auto& gid : group) gid = b.new_group();
    std::vector<std::pair<RankId, BufferId>> arrived;
    for (std::size_t r = 0; r < N; ++r) {
      const BufferId part = foreign_acc[r][std::size_t(p)];
      if (part == kNone) continue;
      const RankId owner = b.buf(part).owner;
      arrived.emplace_back(owner, b.transfer(Stream::Cross, part, owner, group[r], group[std::size_t(owner)]).dst);
    }
    for (auto [owner, partial] : arrived) {
      auto& racc = cross_racc[std::size_t(owner)];
      if (racc == kNone) racc = b.buffer(owner, acc_kind, owner, BufInit::Zero);
      if (fwd) b.merge(Stream::Cross, partial, racc);
      else b.accumulate(Stream::Cross, partial, racc);
    }
  }
  for (std::size_t r = 0; r < N; ++r) {
    if (cross_racc[r] != kNone) {
      if (fwd) b.merge(Stream::Compute, cross_racc[r], own_acc[r]);
      else b.accumulate(Stream::Compute, cross_racc[r], own_acc[r]);
    }
    if (fwd) {
      b.results(RankId(r)).out = own_acc[r];
    } else {
      if (rdkv[r] != kNone) b.accumulate(Stream::Compute, rdkv[r], dkv[r]);
      b.results(RankId(r)).dq = own_acc[r];
      b.results(RankId(r)).dkv = dkv[r];
    }
  }
}

} // namespace

void charm_forward(PlanBuilder& b, const std::vector<RankState>& st, int domains) { charm_pass(b, st, domains); }
void charm_backward(PlanBuilder& b, const std::vector<RankState>& st, int domains) { charm_pass(b, st, domains); }

} // namespace charm::sched::detail
