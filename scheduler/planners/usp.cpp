// Ulysses and USP (TransformerEngine's a2a+p2p context parallelism).
//
// Ranks form `domains` groups of u = n / domains consecutive ranks. Member i of
// a group owns kv heads [i*Hkv/u, (i+1)*Hkv/u) (and their query heads):
//
//   1. all-to-all inside the group: every member cuts its Q and KV shard into u
//      head slices and sends slice j to member j, which receives it into its
//      gathered buffer (owners of the group, its head slice);
//   2. attention on the head slice: one compute over the whole group's tokens
//      (Ulysses, one group), or ring attention across the groups: member i of
//      every group forms one ring (USP);
//   3. all-to-all back: member j sends each owner's rows of its output slice
//      to that owner, which places the u slices into its whole output.
//
// Backward (as DeepSpeed-Ulysses does it): dO goes through the same all-to-all,
// the bundle (Q, dO, LSE, D) is packed on the head slice from the gathered Q
// and the forward's gathered output, the ring backward (or one compute) runs
// on the slice, and dQ and dK/dV go back through the reverse all-to-all.
// A backward-only plan gathers KV, dO, Q and O first.
//
// The all-to-alls run one at a time on one stream: while one runs, its input,
// its u-1 outgoing slices and its gathered buffer are live, and two side by
// side would make peak memory depend on which finishes first (peak memory is a
// property of the schedule). KV goes first, so the ring across domains moves it
// while the rest is gathered.

#include <fmt/format.h>

#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

/// The one stream every all-to-all of a plan runs on.
constexpr Stream kAllToAll = Stream::Q;

struct Groups {
  int domains = 1, u = 1, slice = 1;  // groups, members per group, kv heads per member
  [[nodiscard]] RankId first(RankId r) const { return r / u * u; }
  [[nodiscard]] int member(RankId r) const { return r % u; }
  /// The region member r's gathered buffers cover: its group's owners, its head slice.
  [[nodiscard]] Region heads_of(RankId r, const PlanBuilder& b) const {
    const int i = member(r);
    return {first(r), first(r) + u, i * slice, (i + 1) * slice, 0, b.parts()};
  }
  /// A table of a buffer per rank and member of its group (kNone to start with).
  [[nodiscard]] std::vector<std::vector<BufferId>> per_pair(int ranks) const {
    return std::vector<std::vector<BufferId>>(std::size_t(ranks), std::vector<BufferId>(std::size_t(u), kNone));
  }
  /// r's k-th peer in the order the all-to-alls issue them. Ulysses (one group): r itself first, then
  /// the ranks after it, wrapping round, so that every rank's list is rank 0's rotated and the plan is
  /// its own image under a rotation by one rank (a symmetry by cost: the heads differ). USP's symmetry
  /// moves whole domains, which keep every member's place, so its lists keep the members' order.
  [[nodiscard]] RankId peer(RankId r, int k) const { return first(r) + (domains == 1 ? (member(r) + k) % u : k); }
  /// Every rank with each member of its group (itself included), in the order of peer(). A quotient
  /// plan emits nothing between two phantoms: those pairs are skipped (n^2 of them at scale).
  template <class Fn>
  void each_pair(const PlanBuilder& b, Fn fn) const {
    for (RankId r = 0; r < b.ranks(); ++r)
      for (int k = 0; k < u; ++k)
        if (const RankId p = peer(r, k); !b.phantom(r) || !b.phantom(p)) fn(r, p);
  }
};

Groups groups_of(const PlanBuilder& b, int domains) {
  Groups g;
  g.domains = domains;
  g.u = b.ranks() / domains;
  g.slice = static_cast<int>(b.workload().kv_heads) / g.u;
  return g;
}

/// Step 1's all-to-all for one tensor: per rank, the gathered buffer (kind of `whole`).
std::vector<BufferId> gather_heads(PlanBuilder& b, const Groups& g, const std::vector<BufferId>& whole) {
  constexpr Stream stream = kAllToAll;
  const int n = b.ranks();
  const auto N = std::size_t(n);
  std::vector<BufferId> gathered(N);
  for (int r = 0; r < n; ++r)
    gathered[std::size_t(r)] = b.buffer(r, b.buf(whole[std::size_t(r)]).kind, g.heads_of(r, b), BufInit::None);
  const std::vector<int> group = b.new_group_per_rank();
  // Slices first (own slice straight into place), then the exchange as one group per rank.
  auto slice = g.per_pair(n);
  g.each_pair(b, [&](RankId r, RankId dst) {
    const BufferId src = whole[std::size_t(r)];
    if (dst == r) {
      b.copy(stream, src, b.view(gathered[std::size_t(r)], r));
      return;
    }
    Region part = g.heads_of(dst, b);
    part.owner_begin = r;
    part.owner_end = r + 1;
    BufferId& out = slice[std::size_t(r)][std::size_t(g.member(dst))];
    out = b.buffer(r, b.buf(src).kind, part, BufInit::None);
    b.copy(stream, src, out);
  });
  std::vector<std::vector<OpId>> received(N);  // per rank: its receives, which all fill `gathered`
  g.each_pair(b, [&](RankId r, RankId dst) {
    if (dst == r) return;
    received[std::size_t(dst)].push_back(b.transfer(stream, slice[std::size_t(r)][std::size_t(g.member(dst))], dst,
                                                    group[std::size_t(r)], group[std::size_t(dst)], {}, {},
                                                    b.view(gathered[std::size_t(dst)], r))
                                             .recv);
  });
  // What reads the gathered heads waits for every slice, not for the receive issued last.
  for (std::size_t r = 0; r < N; ++r) b.also_written_by(gathered[r], received[r]);
  return gathered;
}

/// Step 3's all-to-all: per rank, the whole-shard buffer of its own rows, assembled from
/// every member's head slice.
std::vector<BufferId> scatter_heads(PlanBuilder& b, const Groups& g, const std::vector<BufferId>& sliced) {
  constexpr Stream stream = kAllToAll;
  const int n = b.ranks();
  const auto N = std::size_t(n);
  const std::vector<int> group = b.new_group_per_rank();
  // received[r][i]: owner r's rows of member i's slice, on rank r.
  auto received = g.per_pair(n);
  g.each_pair(b, [&](RankId r, RankId dst) {
    const BufferId rows = b.view(sliced[std::size_t(r)], dst);
    received[std::size_t(dst)][std::size_t(g.member(r))] =
        dst == r ? rows : b.transfer(stream, rows, dst, group[std::size_t(r)], group[std::size_t(dst)]).dst;
  });
  std::vector<BufferId> whole(N);
  for (int r = 0; r < n; ++r) {
    whole[std::size_t(r)] = b.buffer(r, b.buf(sliced[std::size_t(r)]).kind, r, BufInit::None);
    for (int k = 0; k < g.u && !b.phantom(r); ++k)
      b.copy(stream, received[std::size_t(r)][std::size_t(g.member(g.peer(r, k)))], whole[std::size_t(r)]);
  }
  return whole;
}

/// The rings of step 2: member i of every group, in domain order.
std::vector<Ring> cross_rings(const Groups& g) {
  std::vector<Ring> rings(std::size_t(g.u));
  for (int i = 0; i < g.u; ++i)
    for (int d = 0; d < g.domains; ++d) rings[std::size_t(i)].push_back(d * g.u + i);
  return rings;
}

}  // namespace

void usp_forward(PlanBuilder& b, std::vector<RankState>& st, int domains) {
  const Groups g = groups_of(b, domains);
  const auto kv = gather_heads(b, g, column(st, &RankState::kv));
  const auto q = gather_heads(b, g, column(st, &RankState::q));
  const auto out = ring_forward_over(b, cross_rings(g), q, kv);
  const auto whole = scatter_heads(b, g, out);
  for (std::size_t r = 0; r < st.size(); ++r) {
    b.results(RankId(r)).out = whole[r];
    st[r].q_heads = q[r];
    st[r].kv_heads = kv[r];
    st[r].out_heads = out[r];
  }
}

void usp_backward(PlanBuilder& b, std::vector<RankState>& st, int domains) {
  const Groups g = groups_of(b, domains);
  const int n = b.ranks();
  const bool after_forward = st.front().q_heads != kNone;  // its head shards are still there
  std::vector<BufferId> dout(st.size()), q, kv, out;
  if (!after_forward) kv = gather_heads(b, g, column(st, &RankState::kv));
  for (int r = 0; r < n; ++r) dout[std::size_t(r)] = b.buffer(r, BufKind::Dout, r, BufInit::Input);
  const auto dout_h = gather_heads(b, g, dout);
  if (after_forward) {
    q = column(st, &RankState::q_heads);
    kv = column(st, &RankState::kv_heads);
    out = column(st, &RankState::out_heads);
  } else {
    q = gather_heads(b, g, column(st, &RankState::q));
    std::vector<BufferId> o(st.size());
    for (int r = 0; r < n; ++r) {
      o[std::size_t(r)] = b.buffer(r, BufKind::Out, r, BufInit::Input);
      b.results(r).out = o[std::size_t(r)];
    }
    out = gather_heads(b, g, o);
  }
  std::vector<BufferId> bundle(st.size());
  for (int r = 0; r < n; ++r) {
    bundle[std::size_t(r)] = b.buffer(r, BufKind::QBundle, g.heads_of(r, b), BufInit::None);
    b.pack(q[std::size_t(r)], dout_h[std::size_t(r)], out[std::size_t(r)], bundle[std::size_t(r)]);
  }
  const auto grads = ring_backward_over(b, cross_rings(g), bundle, kv);
  const auto dq = scatter_heads(b, g, grads.dq);
  const auto dkv = scatter_heads(b, g, grads.dkv);
  for (int r = 0; r < n; ++r) {
    b.results(r).dq = dq[std::size_t(r)];
    b.results(r).dkv = dkv[std::size_t(r)];
  }
}

}  // namespace charm::sched::detail
