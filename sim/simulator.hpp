#pragma once
// The discrete-event simulator: runs a plan against a topology.
//
// - An op is issued when its dependencies are done and it reaches the head of
//   its (rank, stream); consecutive Send/Recv of one ncclGroup are issued
//   together and the stream moves on once all of them completed. An op on
//   another stream that depends on one member starts when that member
//   completes, not when the whole group has (NCCL runs a group as one kernel,
//   which plan.hpp's contract follows; here only the group's own stream waits
//   for all of it). A reader of data several members received depends on each
//   of them (PlanBuilder::also_written_by).
// - A Send/Recv pair is one flow that starts when both sides are issued (NCCL
//   rendezvous), shares the links of its route max-min fairly
//   (FairShareNetwork) and completes its route latency after its last byte.
// - Compute, Merge, Accumulate and Copy take ComputeModel time.
// - Overlap is not free (the topology's stack): while a GPU has a flow in
//   flight its attention blocks progress at 1/(1 + compute_slowdown) of their
//   rate, and while it computes its flows attain 1/(1 + comm_slowdown) of
//   theirs; both rates change, and the ends move, whenever either side starts
//   or stops. Each message also pays the stack's message_us beside the route.
// Everything lives in the Simulator object: several simulations can run in
// one process, in parallel.

#include <cstdint>
#include <functional>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "sim/compute_model.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

struct RankStats {
  Seconds compute_busy_s = 0;    // the compute stream runs an op
  Seconds exposed_comm_s = 0;    // the compute stream is idle while a send/recv of this rank is outstanding
  Seconds comm_busy_s = 0;       // a send/recv of this rank is outstanding (what a profiler shows as NCCL kernels)
  Seconds idle_s = 0;            // makespan - compute_busy
  Seconds end_s = 0;             // when the rank's last op completed
  ir::Bytes peak_mem_bytes = 0;  // high-water mark of live buffers (a buffer lives from first to last access)
};

struct ChannelStats {
  double bytes = 0;
  Seconds busy_s = 0;  // time with at least one flow
  int max_flows = 0;   // most flows at once
};

/// When the stack's host thread of each rank has issued each op: it issues a rank's ops in the
/// plan's order, `host_s` each, and never waits for the GPU (op k of a rank: (k + 1) * host_s).
/// Empty when host_s is 0.
[[nodiscard]] std::vector<Seconds> host_issue_times(const ir::Plan& plan, Seconds host_s);

struct SimResult {
  Seconds makespan_s = 0;
  int last_rank = 0;             // the rank that finishes last (the lowest within a relative 1e-9 of the last end)
  std::vector<Seconds> start_s;  // per op: issue time
  std::vector<Seconds> end_s;    // per op: completion time
  std::vector<RankStats> ranks;
  std::vector<ChannelStats> channels;
  std::vector<ir::OpId> critical_path;  // first op first
  /// Per op of critical_path: when its transfer began (a Send/Recv: both sides issued), else its start.
  std::vector<Seconds> critical_flow_start_s;
  std::uint64_t events = 0;
};

/// What a simulation charges: everything, or one side alone as if the other were free (the
/// paper's T_comm and T_comp of a schedule: its steps' communication, or computation, one after another).
struct SimOptions {
  bool compute = true;        // false: compute, merges and copies take no time
  bool comm = true;           // false: every transfer completes as soon as both sides are issued
  bool critical_path = true;  // false: SimResult::critical_path stays empty (callers that report figures only)
  bool peak_memory = true;    // false: RankStats::peak_mem_bytes stay 0 (callers that fit times only)
  /// The plan's index, where the caller keeps one (a sweep simulates one plan at several batches: its shape,
  /// and so its index, is the same); null: simulate builds it.
  const ir::PlanIndex* index = nullptr;
  /// Called now and then while the ops run (every kProgressOps completed ops, and once at the end) with the
  /// ops completed and the plan's; empty: none. Long runs at cluster scale take minutes.
  std::function<void(std::size_t done, std::size_t total)> progress = {};
  static constexpr std::size_t kProgressOps = std::size_t(1) << 16;
};

/// Simulates `plan` on `topology`: rank r on GPU plan.gpu_of(r) (the first plan.ranks GPUs
/// unless the plan is a deployment that places them, ir::Plan::gpus).
/// A quotient plan (ir::Plan::symmetry) is simulated as one class of ranks: its
/// representatives' flows stand for their images, and each channel's flows are
/// those of its representative channel (representative_channel), so every
/// figure is the full plan's; start_s, end_s and the critical path
/// are the representatives' ops. Its symmetry must be one the topology has
/// (check_topology_symmetry).
/// Errors: too few GPUs, a plan that deadlocks (ops left unfinished), a quotient
/// plan whose symmetry the topology lacks.
[[nodiscard]] Expected<SimResult> simulate(const ir::Plan& plan, const topo::Topology& topology,
                                           const ComputeModel& model, SimOptions options = {});

/// Per op of `plan` (simulated into `r`): when a Send/Recv's transfer began, both sides issued (the later
/// of the pair's issue times; a flow starts the moment its second side is issued), else the op's start.
[[nodiscard]] std::vector<Seconds> flow_start_times(const ir::Plan& plan, const SimResult& r);

/// What `t` offers a quotient plan: its blocks, and whether its routes repeat with them.
[[nodiscard]] ir::BlockSymmetry block_symmetry(const topo::Topology& t);

/// Whether a quotient simulation under `s` of `ranks` ranks is exact on `t` (ir::check_block_symmetry of
/// block_symmetry(t)).
[[nodiscard]] Status check_topology_symmetry(const ir::RankSymmetry& s, const topo::Topology& t, int ranks);

/// Whether the plan's placement (ir::Plan::gpus) puts its ranks on distinct GPUs of `t`, and, for a
/// quotient plan, moves every rank's GPU alike under its symmetry's generator.
[[nodiscard]] Status check_placement(const ir::Plan& plan, const topo::Topology& t);

/// `plan_sym` coarsened to whole blocks of t's block structure (ir::coarsen_to_blocks), or
/// check_topology_symmetry's reason why t cannot run it.
[[nodiscard]] Expected<ir::RankSymmetry> topology_quotient(const ir::RankSymmetry& plan_sym, const topo::Topology& t,
                                                           int ranks);
/// topology_quotient, inactive where it refuses (or where plan_sym is inactive).
[[nodiscard]] ir::RankSymmetry quotient_symmetry(const ir::RankSymmetry& plan_sym, const topo::Topology& t, int ranks);

/// The channel that stands for channel `ch` under `s` (ch itself when s is inactive):
/// its copy in the block of the lowest ranks of its class.
[[nodiscard]] int representative_channel(const topo::Topology& t, const ir::RankSymmetry& s, int ch);

}  // namespace charm::sim
