#include "sim/compute_model.hpp"

#include <cmath>

namespace charm::sim {

ComputeModel ComputeModel::from_gpu(const topo::GpuSpec& g, ir::DType dtype) {
  ComputeModel m;
  m.peak_flops = g.peak_flops(dtype);
  m.efficiency_fwd = g.efficiency_fwd;
  m.efficiency_bwd = g.efficiency_bwd;
  m.half_tokens = g.half_tokens;
  m.launch_s = g.launch_us * 1e-6;
  m.hbm_bytes_per_s = g.hbm_gbps * 1e9;
  return m;
}

Seconds ComputeModel::compute_seconds(ir::Flops flops, ir::Phase phase, const ir::Workload& w) const {
  if (flops <= 0) return launch_s;
  double eff = phase == ir::Phase::Fwd ? efficiency_fwd : efficiency_bwd;
  if (half_tokens > 0) {
    // FLOPs per visible (query, key) pair of one batch-head: 4*D forward, 2.5x that backward.
    const double per_pair = 4.0 * double(w.head_dim) * (phase == ir::Phase::Fwd ? 1.0 : 2.5);
    const double pairs = flops / (per_pair * double(w.batch) * double(w.heads));
    const double side = std::sqrt(std::max(pairs, 0.0));
    eff *= side / (side + half_tokens);
  }
  return flops / (peak_flops * eff) + launch_s;
}

Seconds ComputeModel::op_seconds(const ir::Op& op, const ir::Workload& w) const {
  switch (op.kind) {
  case ir::OpKind::Compute:
    return compute_seconds(op.flops, op.phase, w);
  case ir::OpKind::Merge:
  case ir::OpKind::Accumulate:
  case ir::OpKind::Copy:
    return (hbm_bytes_per_s > 0 ? double(op.bytes) / hbm_bytes_per_s : 0.0) + launch_s;
  case ir::OpKind::Send:
  case ir::OpKind::Recv:
    break;
  }
  return 0;
}

}  // namespace charm::sim
