#pragma once
// One algorithm on one topology, end to end: plan it, simulate it, summarise
// it, and evaluate the paper's closed form next to it (which also gives CCR).
// `charm simulate`, `charm compare` and `charm sweep` all go through here, so
// the three report the same numbers for the same request.

#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/planners/layout.hpp"
#include "scheduler/planners/planned_run.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/chunk_solver.hpp"
#include "sim/compute_model.hpp"
#include "sim/formulas.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"
#include "sim/tensor_parallel.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

struct Evaluation {
  ir::Plan plan;
  SimResult result;
  Summary summary;
  ClosedForm formula;  // formula.ccr is Eq. 7 for the workload's pass(es) on this topology
  /// A deployment evaluated as whole attention blocks (evaluate_deployment): what tensor parallelism adds to
  /// core attention, already in summary.time_s; unset: core attention alone.
  std::optional<TpBlockCost> tp_block;
  /// The balanced layout's chunk map as the solver found it for this run (unset: given, or another layout).
  std::optional<ChunkSolution> chunks;
};

/// The domains charm splits `t` into by default: the topology's hierarchy (NUMA nodes or servers).
[[nodiscard]] int default_domains(const topo::Topology& t);
/// The domains of a run on the first `ranks` GPUs of `t` (rank r on GPU r): those they span.
/// With fewer ranks than GPUs the whole topology's count would be wrong (8 GPUs of a 2 x 8
/// cluster are one node, one domain).
[[nodiscard]] int default_domains(const topo::Topology& t, int ranks);
/// The domains of one CP group of a deployment: those its GPUs (the first `group_ranks` of `gpus`,
/// rank r on gpus[r]) span.
[[nodiscard]] int default_domains(const topo::Topology& t, std::span<const std::int32_t> gpus, int group_ranks);

/// The compute model of `t`'s GPU for the workload's dtype.
[[nodiscard]] ComputeModel compute_model_for(const topo::Topology& t, const ir::Workload& w);

/// The symmetry a simulation of `req` on `t` may run one class of ranks for (sched::target_symmetry on
/// run_target(t)); inactive where there is none.
[[nodiscard]] ir::RankSymmetry simulation_symmetry(const sched::CheckedRequest& req, const topo::Topology& t);
/// The same for a request not checked yet: inactive where the planner refuses it.
[[nodiscard]] ir::RankSymmetry simulation_symmetry(const sched::PlanRequest& req, const topo::Topology& t);

/// Closed forms: exact on a uniform topology; on any other, evaluated with the
/// slowest ring hop (rank r -> r+1) as the uniform link. Pass Both adds the two
/// passes' times; ccr is the forward one's then.
[[nodiscard]] ClosedForm closed_form_on(const std::string& algo, const topo::Topology& t, int ranks,
                                        const ir::Workload& w, const ComputeModel& model);

/// Simulates an already built plan on `t`. Errors are the simulator's (a plan
/// that needs more GPUs than `t` has, a deadlock): not the user's request.
[[nodiscard]] Expected<Evaluation> evaluate_plan(ir::Plan plan, const topo::Topology& t, SimOptions options = {});

/// Plans `req` (normalised) and evaluates it. Planner refusals and simulator
/// failures both come back as errors; callers that must tell them apart call
/// sched::check_request first (as `charm compare` and `charm sweep` do).
/// With `by_symmetry`, a plan whose ranks fall into classes the topology shares
/// (quotient_symmetry) is planned and simulated as one class: the summary, every
/// rank's and channel's figures and the explanation are the full plan's, per-op
/// results and the critical path the class's (for callers that report figures,
/// not ops: `charm sweep`). The class's critical path is one of the full plan's,
/// as long, but where several tie it may take another than the full simulation's
/// walk (the ring's rank 0 issues its groups as [send, recv], the others as
/// [recv, send]), so its shares by class may differ.
/// `options` as simulate's (a sweep leaves the critical path out).
[[nodiscard]] Expected<Evaluation> evaluate(const sched::PlanRequest& req, const topo::Topology& t,
                                            bool by_symmetry = false, SimOptions options = {});

/// The plans of earlier evaluations, kept for requests that differ from one of them only in a power-of-two
/// batch (ir::Plan::scale_batch gives the plan make_plan would build, bit for bit): one plan per algorithm
/// and pass, the last one evaluated, with its index (ir::PlanIndex). A sweep worker holds one; building a plan
/// is a third of a sweep's time, and its batches are mostly powers of two.
class PlanReuse {
 public:
  /// evaluate(req, t, /*by_symmetry=*/true, options)'s summary.
  [[nodiscard]] Expected<Summary> evaluate(const sched::PlanRequest& req, const topo::Topology& t, SimOptions options);
  /// Plans built and plans reused so far.
  [[nodiscard]] std::size_t built() const { return built_; }
  [[nodiscard]] std::size_t reused() const { return reused_; }

 private:
  struct Entry {
    sched::PlanRequest req;  // normalised
    ir::RankSymmetry quotient;
    ir::Plan plan;
    std::optional<ir::PlanIndex> index;  // the plan's: its shape does not change with the batch
  };
  std::vector<Entry> entries_;
  std::size_t built_ = 0, reused_ = 0;
};

/// Simulations known by what they simulate, for a sweep whose configurations repeat one. Two requests that
/// differ only in how a batch x heads product splits between the batch and the heads (batches a power of two
/// apart, the heads and kv heads scaled the other way) are one simulation, bit for bit:
/// - the planner builds the same ops, buffers and bytes (it counts bytes in integers, and FLOPs as
///   4 * batch * heads * ..., an exact integer product), and
/// - the compute model reads the batch and the heads only in products, where a power-of-two factor moves from
///   one to the other without changing a rounding.
/// Algorithms that split heads over ranks (Ulysses, USP) plan by their heads and share with no other request.
/// Safe to use from several threads at once.
class SimulationMemo {
 public:
  struct Key {
    std::size_t topology = 0;  // the caller's numbering of its topologies
    sched::PlanRequest req;    // normalised; the workload with the batch's odd part and the heads scaled to match
    [[nodiscard]] bool operator==(const Key& o) const;
  };
  /// The key of normalised request `req` on the caller's topology `topology`; none where the request shares
  /// with no other.
  [[nodiscard]] static std::optional<Key> key(const sched::PlanRequest& req, std::size_t topology);
  /// The summary an equal simulation gave, if one ran.
  [[nodiscard]] std::optional<Summary> find(const Key& k) const;
  void insert(const Key& k, const Summary& s);

 private:
  struct Hash {
    std::size_t operator()(const Key& k) const;
  };
  mutable std::mutex mu_;
  std::unordered_map<Key, Summary, Hash> done_;
};

/// How many CP groups of layout `l` to simulate for all on `t` (sched::deployment_copies on t's blocks).
[[nodiscard]] Expected<int> deployment_copies(const sched::Layout& l, const topo::Topology& t);

/// What `t` offers a run planned for it (sched::plan_run): whether its GPU prices the zigzag halves of
/// `dtype` work alike, and its blocks.
[[nodiscard]] sched::RunTarget run_target(const topo::Topology& t, ir::DType dtype);

/// A run lowered for the simulator, every decision taken before it starts: the plan, its ranks on GPUs (and,
/// where a symmetry serves, the quotient that stands for the other ranks), and for a deployment's whole attention
/// blocks tensor parallelism's part with its rings routed on the topology. The simulator asks the planner nothing.
struct LoweredRun {
  ir::Plan plan;
  std::optional<TpBlock> tp_block;  // unset: core attention alone
};

/// A deployment (sched/layout.hpp) lowered: `group` (one CP group's full plan: l.cp ranks, TP's share of the
/// heads) placed as `copies` groups of `l` (l.groups(): every group; fewer: the quotient deployment_copies
/// allows). `block_model` (the whole model's workload, before TP splits its heads): the times are the whole
/// attention block's, tensor parallelism's collectives and the projections' GEMMs added to core attention
/// (sim/tensor_parallel.hpp); null: core attention alone. Error (of --tp): a layout larger than `t`.
[[nodiscard]] Expected<LoweredRun> lower_deployment(const ir::Plan& group, const sched::Layout& l, int copies,
                                                    const topo::Topology& t, const ir::Workload* block_model);

/// A lowered run simulated on `t` (evaluate_plan), its TP block's cost added (Evaluation::tp_block).
[[nodiscard]] Expected<Evaluation> evaluate_lowered(LoweredRun run, const topo::Topology& t, SimOptions options = {});

/// `group_req` (checked) planned, lower_deployment, then evaluate_lowered.
[[nodiscard]] Expected<Evaluation> evaluate_deployment(const sched::CheckedRequest& group_req, const sched::Layout& l,
                                                       int copies, const topo::Topology& t,
                                                       const ir::Workload* block_model = nullptr);
/// The same for a request not yet checked (sched::CheckedRequest::check first; its refusal is the error).
[[nodiscard]] Expected<Evaluation> evaluate_deployment(const sched::PlanRequest& group_req, const sched::Layout& l,
                                                       int copies, const topo::Topology& t,
                                                       const ir::Workload* block_model = nullptr);

}  // namespace charm::sim
