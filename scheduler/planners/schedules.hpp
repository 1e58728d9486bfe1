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
};

// Each forward schedule sets results(r).out; each backward schedule sets dq and dkv.
void ring_forward(PlanBuilder& b, const std::vector<RankState>& st);
void ring_backward(PlanBuilder& b, const std::vector<RankState>& st);
void allgather_forward(PlanBuilder& b, const std::vector<RankState>& st);
void allgather_backward(PlanBuilder& b, const std::vector<RankState>& st);
void merge_forward(PlanBuilder& b, const std::vector<RankState>& st);
void merge_backward(PlanBuilder& b, const std::vector<RankState>& st);
/// CHARM+ over domains x (n / domains); domains == 1 is RM+.
void charm_forward(PlanBuilder& b, const std::vector<RankState>& st, int domains);
void charm_backward(PlanBuilder& b, const std::vector<RankState>& st, int domains);

} // namespace charm::sched::detail
