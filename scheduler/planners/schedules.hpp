#pragma once
// Internal interface between the pass driver (planners.cpp) and each schedule.

#include <vector>

#include "scheduler/planners/plan_builder.hpp"

namespace charm::sched::detail {

/// What every rank starts a pass with, and what the schedule leaves behind.
struct RankState {
  BufferId q = ir::kNone;        // Q input
  BufferId kv = ir::kNone;       // KV input
  BufferId qbundle = ir::kNone;  // backward bundle (Q, dO, LSE, D), packed before the backward schedule
  // Head shards a Ulysses forward leaves for its backward (kNone otherwise).
  BufferId q_heads = ir::kNone, kv_heads = ir::kNone, out_heads = ir::kNone;
};

/// One field of every rank's state, indexed by rank (what the *_over schedules take).
[[nodiscard]] inline std::vector<BufferId> column(const std::vector<RankState>& st, BufferId RankState::*field) {
  std::vector<BufferId> v;
  v.reserve(st.size());
  for (const auto& s : st) v.push_back(s.*field);
  return v;
}

// Each forward schedule sets results(r).out; each backward schedule sets dq and dkv.

/// The members of one ring in order; kv moves from member i to member i+1.
using Ring = std::vector<RankId>;
[[nodiscard]] std::vector<Ring> one_ring(int ranks);
/// Ring attention over several disjoint rings at once (every rank in one ring), on
/// any q/kv buffers (indexed by rank); returns the Out accumulator per rank.
std::vector<BufferId> ring_forward_over(PlanBuilder& b, const std::vector<Ring>& rings, const std::vector<BufferId>& q,
                                        const std::vector<BufferId>& kv);
struct RingGradients {
  std::vector<BufferId> dq, dkv;  // per rank: dQ of its queries, dK/dV of the kv it started with
};
RingGradients ring_backward_over(PlanBuilder& b, const std::vector<Ring>& rings, const std::vector<BufferId>& qbundle,
                                 const std::vector<BufferId>& kv);

void ring_forward(PlanBuilder& b, const std::vector<RankState>& st);
void ring_backward(PlanBuilder& b, const std::vector<RankState>& st);
void allgather_forward(PlanBuilder& b, const std::vector<RankState>& st);
void allgather_backward(PlanBuilder& b, const std::vector<RankState>& st);
void merge_forward(PlanBuilder& b, const std::vector<RankState>& st);
void merge_backward(PlanBuilder& b, const std::vector<RankState>& st);
/// CHARM+ over domains x (n / domains); domains == 1 is RM+.
void charm_forward(PlanBuilder& b, const std::vector<RankState>& st, int domains);
void charm_backward(PlanBuilder& b, const std::vector<RankState>& st, int domains);
/// Ulysses inside each domain (all-to-all from sequence to head shards), ring
/// across domains; domains == 1 is Ulysses, ranks_per_domain == 1 is ring.
/// The backward builds its bundle on the head shards, so the driver packs none.
void usp_forward(PlanBuilder& b, std::vector<RankState>& st, int domains);
void usp_backward(PlanBuilder& b, std::vector<RankState>& st, int domains);
/// TASP: KV in one part per Hamiltonian cycle, all cycles at once (forward only).
[[nodiscard]] std::vector<int> tasp_cycle_steps(int ranks);
void tasp_forward(PlanBuilder& b, const std::vector<RankState>& st);

}  // namespace charm::sched::detail
