// TASP (Topology-aware Sequence Parallelism, arXiv 2509.26541): Ring-Attention's
// all-gather of KV decomposed over several arc-disjoint directed Hamiltonian
// cycles of the all-to-all topology, all cycles moving data at once.
//
// Cycles: for every step k in [1, n) coprime to n, the cycle r -> r+k (mod n) is
// Hamiltonian, and cycles of different k share no arc. These rotation cycles
// give phi(n) cycles: all n-1 arcs out of every rank when n is prime, fewer
// otherwise (4 of 7 at n = 8). A full decomposition into n-1 cycles exists for
// most n (Tillson) but is not built here.
//
// Each KV shard is cut into m = phi(n) token parts; part c travels cycle c:
//
//   step 0:       Q_r * KV_r (whole, local)
//   step s >= 1:  for every cycle c, Q_r * (part c of KV_{r - s*k_c})
//   exchange:     for every cycle c, r -> r + k_c forwards the part it got last,
//                 all cycles of a step in one ncclGroup
//
// As in ring, the exchange for step s+1 is launched with the compute of step s
// and waits for the compute of step s-1. TASP defines no backward pass (its
// paper and reference code are forward only), so neither does this planner.

#include <numeric>

#include "scheduler/planners/schedules.hpp"

namespace charm::sched::detail {

using namespace charm::ir;

std::vector<int> tasp_cycle_steps(int ranks) {
  std::vector<int> steps;
  for (int k = 1; k < ranks; ++k)
    if (std::gcd(k, ranks) == 1) steps.push_back(k);
  return steps;
}

void tasp_forward(PlanBuilder& b, const std::vector<RankState>& st) {
  const int n = b.ranks();
  const auto N = std::size_t(n);
  const auto steps = tasp_cycle_steps(n);
  const std::size_t m = steps.size();
  CHARM_ASSERT(m == 0 || int(m) == b.parts(), "the plan counts one token part per cycle");
  std::vector<BufferId> acc(N);
  std::vector<std::vector<BufferId>> cur(m, std::vector<BufferId>(N, kNone));
  std::vector<OpId> prev_compute(N, kNone), last_compute(N, kNone);
  for (int r = 0; r < n; ++r) {
    acc[std::size_t(r)] = b.buffer(r, BufKind::Out, r, BufInit::Zero);
    for (std::size_t c = 0; c < m; ++c) {
      Region part = b.region(st[std::size_t(r)].kv);
      part.part_begin = int(c);
      part.part_end = int(c) + 1;
      cur[c][std::size_t(r)] = b.buffer(r, BufKind::Kv, part, BufInit::None);
      b.copy(Stream::Kv, st[std::size_t(r)].kv, cur[c][std::size_t(r)]);
    }
  }
  for (int step = 0; step < n; ++step) {
    std::vector<std::vector<BufferId>> next;
    if (step + 1 < n) {
      const std::vector<int> group = b.new_group_per_rank();
      next.assign(m, std::vector<BufferId>(N, kNone));
      for (std::size_t c = 0; c < m; ++c)
        for (int r = 0; r < n; ++r) {
          const int dst = (r + steps[c]) % n;
          std::vector<OpId> es, ed;
          if (prev_compute[std::size_t(r)] != kNone) es.push_back(prev_compute[std::size_t(r)]);
          if (prev_compute[std::size_t(dst)] != kNone) ed.push_back(prev_compute[std::size_t(dst)]);
          auto t = b.transfer(Stream::Kv, cur[c][std::size_t(r)], dst, group[std::size_t(r)], group[std::size_t(dst)],
                              es, ed);
          next[c][std::size_t(dst)] = t.dst;
        }
    }
    for (std::size_t r = 0; r < N; ++r) {
      if (step == 0) {
        if (b.any_visible(st[r].q, st[r].kv)) last_compute[r] = b.compute_fwd(st[r].q, st[r].kv, acc[r]);
        continue;
      }
      for (std::size_t c = 0; c < m; ++c)
        if (b.any_visible(st[r].q, cur[c][r])) last_compute[r] = b.compute_fwd(st[r].q, cur[c][r], acc[r]);
    }
    prev_compute = last_compute;
    if (step + 1 < n) cur = std::move(next);
  }
  for (std::size_t r = 0; r < N; ++r) b.results(RankId(r)).out = acc[r];
}

}  // namespace charm::sched::detail
