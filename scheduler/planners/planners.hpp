#pragma once
// The planners: compile an algorithm, a workload and a cluster shape into a plan.

#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/ir/plan.hpp"

namespace charm::sched {

struct PlanRequest {
  std::string algo;
  ir::Workload workload;
  int ranks = 8;
  int domains = 1;  // ranks = domains x ranks_per_domain
};

/// Names of every algorithm, in the order reports list them.
[[nodiscard]] const std::vector<std::string>& algorithm_names();
/// The algorithm's canonical name, for a name given in any case ("Ring" is ring); an
/// unknown name is an error of `flag` that suggests the nearest name and lists them all.
[[nodiscard]] Expected<std::string> resolve_algorithm(std::string_view name, const std::string& flag = "--algo");
/// What building a plan would cost, known before building it: op count and the plan's
/// memory. The op counts are ~c x ranks^2 (each rank meets every other rank's shard), with
/// c per algorithm and pass, and for charm and usp by domains (Algorithm::OpCount); TASP multiplies by
/// its part count; a causal mask on the contiguous layout takes the blocks it hides off
/// (rm+ and charm about half their ops, the ring family a sixth of the forward's). An estimate, for refusing up front
/// what would not fit, never for sizing.
struct PlanEstimate {
  double ops = 0;
  // Building the plan: its ops, dependencies and buffers, and the planner's tables (kPlanBytesPerOp an op).
  double plan_bytes = 0;
  // A quotient plan's (estimate_quotient_plan): plan_bytes above counts these too.
  double phantom_buffers = 0;  // buffers the planner makes on phantom ranks (ring: about ranks^2)
  double phantom_bytes = 0;    // the store that holds them (PhantomBuffers)
  double planner_bytes = 0;    // the schedule's tables over all ranks (merge, allgather-kv: ranks^2 ids)
};
[[nodiscard]] PlanEstimate estimate_plan(const PlanRequest& req);
/// The memory building a plan takes an op at its peak, and what simulating it adds over that peak (the
/// simulator's state takes the planner's freed tables first). Measured at 512 ranks as the process's peak
/// resident memory after each stage (bench/scale_stages), ring, merge, rm+, charm and allgather-kv, both
/// passes, full, causal and causal zigzag: building 105-121 bytes an op, building then simulating 119-137
/// (48-byte ops).
/// `charm simulate`, `show` and `calibrate` check plan_bytes + kSimBytesPerOp * ops against the budget.
inline constexpr double kPlanBytesPerOp = 115;
inline constexpr double kSimBytesPerOp = 25;
/// The line that refuses work estimated to need `bytes` over a `budget` of bytes, named
/// `budget_name` ("--max-memory", "half of this machine's memory"): one text for every command.
[[nodiscard]] std::string over_budget_text(const std::string& what, double bytes, double budget,
                                           const std::string& budget_name);
/// The same for the quotient plan under `quotient` (a coarsening of plan_symmetry(req)): its ops
/// and memory, with the phantom buffers and the schedule's tables, which the planner still makes
/// for every rank (it describes every rank, and emits the representatives' ops only).
[[nodiscard]] PlanEstimate estimate_quotient_plan(const PlanRequest& req, const ir::RankSymmetry& quotient);
/// Whether the algorithm's schedule depends on PlanRequest::domains (charm, usp); the others ignore it.
[[nodiscard]] bool uses_domains(const std::string& algo);
/// Whether the algorithm plans a backward pass (TASP is forward only).
[[nodiscard]] bool has_backward(const std::string& algo);
/// The request as the planner runs it: the -zigzag variants always run on the zigzag layout; Ulysses and
/// USP over more ranks than KV heads with each KV head repeated (replicated_kv_heads).
[[nodiscard]] PlanRequest normalised(PlanRequest req);
/// The KV heads the planner runs with: the workload's, or, where a head-splitting algorithm (Ulysses, USP)
/// spreads fewer KV heads than ranks over its all-to-all and the query heads still divide, one per rank (each
/// KV head repeated, as DeepSpeed-Ulysses and Megatron-LM do; the copies travel and are held).
[[nodiscard]] std::int64_t replicated_kv_heads(const PlanRequest& req);
/// The counts every request needs: ranks in [1, 2^20], and domains that divide them.
[[nodiscard]] Status check_ranks(int ranks, int domains);
/// Checks that the algorithm can plan this request (rank count, domains, workload).
[[nodiscard]] Status check_request(const PlanRequest& req);
/// Builds the plan; errors (exit code 2 material) name the flag at fault.
[[nodiscard]] Expected<ir::Plan> make_plan(const PlanRequest& req);

/// A request as the planner runs it (normalised) that the planner accepts (check_request). Only `check` makes
/// one, so the stages that take one (plan_symmetry, make_plan) neither normalise nor check it again.
class CheckedRequest {
 public:
  /// `req` normalised, or why its algorithm cannot plan it.
  [[nodiscard]] static Expected<CheckedRequest> check(PlanRequest req);
  [[nodiscard]] const PlanRequest& get() const { return req_; }
  const PlanRequest* operator->() const { return &req_; }

 private:
  explicit CheckedRequest(PlanRequest req) : req_(std::move(req)) {}
  PlanRequest req_;
};

/// What work may take of this machine's memory, and how that was chosen ("--max-memory", "half of this
/// machine's memory"). The estimates above judge work against it before the work starts.
struct MemoryBudget {
  double bytes = std::numeric_limits<double>::infinity();
  std::string name = "no limit";
  /// Refuses `what`, estimated at `need` bytes, over the budget: an error of `flag` (over_budget_text).
  [[nodiscard]] Status fits(double need, const std::string& what, const std::string& flag) const;
  /// ... building `req`'s plan (its quotient's under an active `quotient`) with `extra_bytes_per_op` more an op (a
  /// JSON copy, the simulator's state): an error of --ranks.
  [[nodiscard]] Status fits_plan(const PlanRequest& req, double extra_bytes_per_op, const std::string& what,
                                 const ir::RankSymmetry& quotient = {}) const;
};

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
/// Whether `quotient` is well formed (ir::check_symmetry_shape) and coarsens plan_symmetry(req):
/// the same kind, a block that is a multiple of its block.
[[nodiscard]] Status check_quotient(const PlanRequest& req, const ir::RankSymmetry& quotient);
/// What building a quotient plan took besides the plan (measured, where estimate_quotient_plan guesses).
struct QuotientStats {
  std::size_t phantom_buffers = 0;  // buffers the planner made on phantom ranks
  std::size_t phantom_bytes = 0;    // the heap memory that held them
};
/// The quotient plan under `quotient` (checked by check_quotient), built without the full plan: it
/// equals ir::quotient_of(make_plan(req), quotient), op for op. An inactive `quotient` gives the full plan.
/// Told the ops built so far, now and then while a plan is built (every PlanBuilder::kProgressOps).
using PlanProgress = std::function<void(std::size_t ops)>;
[[nodiscard]] Expected<ir::Plan> make_plan(const PlanRequest& req, ir::RankSymmetry quotient,
                                           QuotientStats* stats = nullptr, const PlanProgress& progress = {});
/// The same for a checked request: planned as it is, with no check again.
[[nodiscard]] Expected<ir::Plan> make_plan(const CheckedRequest& req, ir::RankSymmetry quotient = {},
                                           QuotientStats* stats = nullptr, const PlanProgress& progress = {});

}  // namespace charm::sched
