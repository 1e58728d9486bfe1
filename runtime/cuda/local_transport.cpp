// PlanRunner's local transport (cuda-local): a Send/Recv group as device-to-device copies on one GPU.

#include <fmt/format.h>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/kernels.hpp"
#include "runtime/cuda/op_where.hpp"
#include "runtime/cuda/plan_runner.hpp"

namespace charm::rt::cuda {

using ir::OpId;
using ir::OpKind;

Expected<bool> PlanRunner::step_local_group(Lane& l, std::size_t end) {
  bool moved = false;
  if (!l.open) {
    for (std::size_t i = l.next; i < end; ++i)
      if (!deps_enqueued(l.ops[i])) return false;
    for (std::size_t i = l.next; i < end; ++i) {
      const OpId id = l.ops[i];
      CHARM_TRY(wait_deps(l, id));
      CHARM_CUDA_TRY(cudaEventRecord(start_ev_[std::size_t(id)], l.cs));
      opened_[std::size_t(id)] = 1;
    }
    l.open = moved = true;
  }
  bool complete = true;
  for (std::size_t i = l.next; i < end; ++i) {
    const OpId id = l.ops[i];
    const OpId peer = idx_.partner(id);
    const auto& op = plan_.op(id);
    if (op.kind == OpKind::Send) {
      complete = complete && peer != ir::kNone && copied_[std::size_t(peer)];
      continue;
    }
    if (copied_[std::size_t(id)]) continue;
    if (peer == ir::kNone || !opened_[std::size_t(peer)]) {
      complete = false;
      continue;
    }
    // The sender has reached its send: copy its source into our destination.
    auto sa = ir::decode(plan_, peer);
    if (!sa) return Error{op_where(plan_, peer), sa.error().what};
    auto ra = ir::decode(plan_, id);
    if (!ra) return Error{op_where(plan_, id), ra.error().what};
    const ir::BufferId sb = std::get<ir::SendArgs>(*sa).src, rb = std::get<ir::RecvArgs>(*ra).dst;
    CHARM_CUDA_TRY(cudaStreamWaitEvent(l.cs, start_ev_[std::size_t(peer)], 0));
    CHARM_TRY(local_transfer(id, sb, rb, l.cs));
    CHARM_CUDA_TRY(cudaEventRecord(copy_ev_[std::size_t(id)], l.cs));
    copied_[std::size_t(id)] = 1;
    moved = true;
  }
  if (!complete) return moved;
  for (std::size_t i = l.next; i < end; ++i) {
    const OpId id = l.ops[i];
    if (plan_.op(id).kind == OpKind::Send)
      CHARM_CUDA_TRY(cudaStreamWaitEvent(l.cs, copy_ev_[std::size_t(idx_.partner(id))], 0));
  }
  for (std::size_t i = l.next; i < end; ++i) {
    CHARM_CUDA_TRY(cudaEventRecord(end_ev_[std::size_t(l.ops[i])], l.cs));
    enqueued_[std::size_t(l.ops[i])] = 1;
  }
  l.open = false;
  l.next = end;
  return true;
}

Status PlanRunner::local_transfer(OpId id, ir::BufferId sb, ir::BufferId rb, cudaStream_t s) {
  // A transfer moves a whole buffer or view: both sides hold one kind over one region.
  CHARM_TRY(local_buffers(id, {sb, rb}));
  const auto &src = plan_.buffer(sb), &dst = plan_.buffer(rb);
  if (src.kind != dst.kind || dev_[sb].region != dev_[rb].region)
    return Error{op_where(plan_, id), fmt::format("receives {} into {}: a transfer needs the same kind and region on "
                                                  "both sides",
                                                  ir::buffer_label(plan_, sb), ir::buffer_label(plan_, rb))};
  const DeviceBuffer& d = dev_[rb];
  if (!d.staged) {
    CHARM_CUDA_TRY(cudaMemcpyAsync(base(rb), base(sb), d.bytes(), cudaMemcpyDeviceToDevice, s));
    return {};
  }
  // O goes through the dtype, as it would over the wire; LSE stays fp32.
  const auto dtype = plan_.workload.dtype;
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x) {
    const std::int64_t nq = d.layout.sections[0].elems, nl = d.layout.sections[1].elems;
    CHARM_TRY(convert_from_f32(dtype, f32(sb, x, 0), wire_section(rb, x, 0), nq, s));
    CHARM_TRY(convert_to_f32(dtype, wire_section(rb, x, 0), f32(rb, x, 0), nq, s));
    CHARM_CUDA_TRY(
        cudaMemcpyAsync(f32(rb, x, 1), f32(sb, x, 1), std::size_t(nl) * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
  return {};
}

}  // namespace charm::rt::cuda
