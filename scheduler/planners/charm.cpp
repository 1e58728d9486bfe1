// CHARM+ (paper Section 3.3) over RM+ runs (Section 3.2, rm_plus.cpp): queries cross domains, results go home.
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

#include <utility>
#include <vector>

#include "scheduler/planners/rm_plus.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

namespace {

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
