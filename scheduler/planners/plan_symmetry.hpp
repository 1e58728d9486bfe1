#pragma once
// The rank symmetry of an algorithm's plan for a request, and the quotients that coarsen it: what lets the
// simulator run one class of ranks for all.

#include "scheduler/ir/plan.hpp"
#include "scheduler/planners/request.hpp"

namespace charm::sched {

/// The rank symmetry of the algorithm's plan for this request (ir/symmetry.hpp): the group with
/// the smallest block that the plan is invariant under, or Kind::None (also where that group is
/// trivial, block = ranks, or the request is not valid). A table, checked against
/// ir::check_symmetric over algorithms, passes, masks, layouts, rank and domain counts by the tests:
///   ring, ring-zigzag, allgather-kv, tasp, tasp-zigzag   rotate, block 1
///   merge                                                xor, block 1 (forward only; its backward's
///                                                        reduce-scatter orders the owners it sends
///                                                        by their number: block ranks / 2)
///   rm+, and charm on 1 or 2 domains                     xor, block 1
///   charm on more domains                                rotate, block ranks / domains (queries
///                                                        cross domains as a rotation)
///   usp on 2 or more domains                             rotate, block ranks / domains
///   ulysses                                              rotate, block 1, by cost (a rank's head
///                                                        slice is its own; every slice costs the same)
/// A causal mask breaks all of them (the mask pieces and FLOPs of a pair depend on where the ranks
/// are), but for usp on the zigzag layout with 2 or more ranks a domain: its computes span whole
/// domains, whose pairs all see the same number of keys under zigzag; and for packed documents of
/// one length on the contiguous layout, which repeat every document_period(w, ranks) ranks: the
/// algorithm's own symmetry, its block made a multiple of that period.
/// With `zigzag_halves_alike` (the caller's cost model prices the zigzag layout's two half blocks the
/// same): a causal zigzag plan without a symmetry by label takes its algorithm's unmasked one, by cost
/// (ir::RankSymmetry::zigzag_halves_alike).
[[nodiscard]] ir::RankSymmetry plan_symmetry(const PlanRequest& req, bool zigzag_halves_alike = false);
[[nodiscard]] ir::RankSymmetry plan_symmetry(const CheckedRequest& req, bool zigzag_halves_alike = false);
/// The fewest ranks a rotation must move so that packed documents land on documents: k such that
/// k shards hold a whole number of documents, where every document has one length and the layout is
/// contiguous (so the mask repeats every k ranks, round the end too); 0 where there is no such k.
[[nodiscard]] int document_period(const ir::Workload& w, int ranks);
/// What the planner builds a plan by: nothing (the full plan), or a rank symmetry checked once against the
/// request's plan (Quotient::of), which make_plan and the PlanBuilder then take as it is.
class Quotient {
 public:
  Quotient() = default;  // the full plan
  /// `s` where it is well formed (ir::check_symmetry_shape) and coarsens plan_symmetry(req): the same kind, a
  /// block that is a multiple of the plan's. It takes what the plan's images may differ in from the plan's own
  /// symmetry (heads_are_labels, zigzag_halves_alike). An inactive `s`: the full plan.
  [[nodiscard]] static Expected<Quotient> of(const CheckedRequest& req, ir::RankSymmetry s);
  [[nodiscard]] const ir::RankSymmetry& symmetry() const { return s_; }
  [[nodiscard]] bool active() const { return s_.active(); }

 private:
  explicit Quotient(const ir::RankSymmetry& s) : s_(s) {}
  ir::RankSymmetry s_;
};

}  // namespace charm::sched
