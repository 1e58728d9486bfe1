#pragma once
// What one attention block pays for tensor parallelism beside its core attention, under Megatron-LM's
// sequence parallelism (its default with TP > 1): each TP rank holds tokens / TP of the block's input;
//
//   forward:  all-gather the input (tokens / CP, hidden) over the TP group, QKV projection GEMM,
//             core attention, output projection GEMM, reduce-scatter its result;
//   backward: all-gather the output's gradient, the output projection's data- and weight-gradient GEMMs,
//             core attention's backward, then the QKV projection's data-gradient GEMM beside a second
//             all-gather of the input (kept sharded in the forward) and its weight-gradient GEMM beside the
//             reduce-scatter of the input's gradient: Megatron-LM issues those two collectives
//             asynchronously against the GEMMs (tensor_parallel/layers.py), so each costs the longer of the two.
//
// A collective is NCCL's ring: TP - 1 steps, each moving one rank's shard to its ring successor. Every
// TP group runs its collective at the same moment, so their flows share the links they meet: the rate of
// a step is the max-min fair share of all GPUs' ring flows on the topology's channels (sim::FairShareNetwork),
// with a collective's several channels free of the per-peer cap a lone point-to-point flow has (the
// per-GPU injection limit, NCCL's attained bus bandwidth, still holds). Each step also pays the links'
// latency and the stack's per-message cost.
//
// GEMMs attain the GPU's published dense GEMM fraction of peak (GpuSpec::gemm_efficiency, sourced in
// gpu_arch.cpp). Left out: the layer norm, the reduction inside the reduce-scatter, and any overlap of
// the collectives with core attention (TransformerEngine's comm-GEMM overlap is off by default).

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/ir/workload.hpp"
#include "scheduler/planners/layout.hpp"
#include "support/expected.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

struct TpBlockCost {
  int tp = 1;
  double gather_s = 0;       // the all-gathers on the block's path
  double scatter_s = 0;      // the reduce-scatters on it
  double gemm_s = 0;         // the projections' GEMMs on it
  double hidden_comm_s = 0;  // collective time under a GEMM (backward's asynchronous pair): not on the path
  int all_gathers = 0, reduce_scatters = 0;
  double ring_gbps = 0;    // the slowest ring flow's rate, all TP groups at once (0 with TP 1)
  std::string ring_link;   // the kind of link that flow is slowest on ("nvlink", "pcie", ...)
  double shard_bytes = 0;  // what one ring step moves per GPU

  [[nodiscard]] double total_s() const { return gather_s + scatter_s + gemm_s; }
  /// "TP 8 over pcie at 10.1 GB/s a GPU: 2 all-gathers 1.23 ms, 1 reduce-scatter 0.61 ms, QKV + output GEMMs 3.2 ms"
  [[nodiscard]] std::string line() const;
};

/// Tensor parallelism's part of an attention block, lowered onto a topology before it is priced: the whole
/// model's workload (its heads before TP splits them; hidden size = heads x head dim), the layout, and one step
/// of every TP ring at once as routed flows (TP rank k of each CP rank's group to k + 1; none with TP 1).
struct TpBlock {
  /// One ring flow: the channels it crosses and their latency.
  struct Flow {
    topo::Route route;
    double latency_s = 0;
  };
  ir::Workload model;
  sched::Layout layout;
  std::vector<Flow> ring;
};

/// The block of workload `w` in layout `l`, its rings routed on `t`. Error (of --tp): a layout that does not fit
/// the topology's GPUs.
[[nodiscard]] Expected<TpBlock> lower_tp_block(const ir::Workload& w, const sched::Layout& l, const topo::Topology& t);

/// The block's tensor-parallel cost for its workload's pass (pass Both: both added) on `t`.
[[nodiscard]] TpBlockCost tp_block_cost(const TpBlock& b, const topo::Topology& t);
/// Both at once: lower_tp_block, then its cost.
[[nodiscard]] Expected<TpBlockCost> tp_block_cost(const ir::Workload& w, const sched::Layout& l,
                                                  const topo::Topology& t);

/// The attained fraction of dense peak the GPU's GEMMs reach: the file's gpu.gemm_efficiency, else its
/// architecture's published figure.
[[nodiscard]] double gemm_efficiency(const topo::GpuSpec& g);
/// Where gemm_efficiency's figure comes from ("the file's", a publication, or "assumed: ...").
[[nodiscard]] std::string gemm_source(const topo::GpuSpec& g);
/// "GEMMs at 0.803 of dense peak: <source>": the reports' line when their times hold the projections.
[[nodiscard]] std::string gemm_line(const topo::GpuSpec& g);

}  // namespace charm::sim
