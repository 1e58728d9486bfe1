// PlanRunner's side of NCCL transfers: what a Send or Recv moves and the wire conversions around a group.

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/kernels.hpp"
#include "runtime/cuda/op_where.hpp"
#include "runtime/cuda/plan_runner.hpp"

namespace charm::rt::cuda {

using ir::is_comm;
using ir::OpId;
using ir::OpKind;

Status PlanRunner::convert_wire(ir::BufferId b, bool to_wire, cudaStream_t s) {
  const DeviceBuffer& d = dev_[b];
  const std::int64_t nq = d.layout.sections[0].elems, nl = d.layout.sections[1].elems;
  const auto dtype = plan_.workload.dtype;
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x) {
    char *wire_lse = wire_section(b, x, 1), *lse = section(b, x, 1);
    if (to_wire)
      CHARM_TRY(convert_from_f32(dtype, f32(b, x, 0), wire_section(b, x, 0), nq, s));
    else
      CHARM_TRY(convert_to_f32(dtype, wire_section(b, x, 0), f32(b, x, 0), nq, s));
    CHARM_CUDA_TRY(cudaMemcpyAsync(to_wire ? wire_lse : lse, to_wire ? lse : wire_lse, std::size_t(nl) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, s));
  }
  return {};
}

Status PlanRunner::stage_group(std::span<const OpId> group, bool before, cudaStream_t s) {
  for (OpId id : group) {
    const bool send = plan_.op(id).kind == OpKind::Send;
    if (send != before) continue;
    auto a = ir::decode(plan_, id);
    if (!a) return Error{op_where(plan_, id), a.error().what};
    const ir::BufferId b = send ? std::get<ir::SendArgs>(*a).src : std::get<ir::RecvArgs>(*a).dst;
    CHARM_TRY(local_buffers(id, {b}));
    if (!dev_[b].staged) continue;
    CHARM_TRY(convert_wire(b, /*to_wire=*/send, s));
  }
  return {};
}

Expected<PlanRunner::Transfer> PlanRunner::transfer(OpId id) const {
  auto a = ir::decode(plan_, id);
  if (!a) return Error{op_where(plan_, id), a.error().what};
  if (!is_comm(plan_.op(id))) return Error{op_where(plan_, id), "not a transfer"};
  const ir::BufferId b =
      plan_.op(id).kind == OpKind::Send ? std::get<ir::SendArgs>(*a).src : std::get<ir::RecvArgs>(*a).dst;
  CHARM_TRY(local_buffers(id, {b}));
  const DeviceBuffer& d = dev_[b];
  if (d.staged) return Transfer{wire_section(b, d.region.owner_begin, 0), d.wire_bytes()};
  return Transfer{base(b), d.bytes()};
}

}  // namespace charm::rt::cuda
