#pragma once
// ComputeModel: how long one op of a plan keeps its stream busy.
//
//   compute:        flops / (peak(dtype) * efficiency(pass, block side)) + launch
//   efficiency:     e_pass * side / (side + half_tokens), side = sqrt(visible pairs per batch-head)
//   merge/acc/copy: bytes / hbm_bandwidth + launch    (free when hbm_bandwidth is 0)
// A user calibrates it from measured kernel times through the topology's "gpu"
// block (efficiency, half_tokens, launch_us, hbm_gbps).

#include "scheduler/ir/plan.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

using Seconds = double;

struct ComputeModel {
  double peak_flops = 1e14;
  double efficiency_fwd = 1.0, efficiency_bwd = 1.0;
  double half_tokens = 0;
  Seconds launch_s = 0;
  double hbm_bytes_per_s = 0;  // 0: memory-bound ops take no time

  [[nodiscard]] static ComputeModel from_gpu(const topo::GpuSpec& g, ir::DType dtype);
  /// Time of an op that runs on a stream by itself (Compute, Merge, Accumulate, Copy).
  [[nodiscard]] Seconds op_seconds(const ir::Op& op, const ir::Workload& w) const;
  /// Time of a compute block of `flops` in `phase` (the closed forms use this too).
  [[nodiscard]] Seconds compute_seconds(ir::Flops flops, ir::Phase phase, const ir::Workload& w) const;
};

}  // namespace charm::sim
