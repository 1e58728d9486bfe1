// PlanRunner's local ops (compute, merge, accumulate, pack, copy) and the checks of their buffers.

#include <fmt/format.h>

#include <variant>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/kernels.hpp"
#include "runtime/cuda/op_where.hpp"
#include "runtime/cuda/plan_runner.hpp"

namespace charm::rt::cuda {

using ir::BufKind;
using ir::OpId;

Status PlanRunner::run_local(Lane& l, OpId id) {
  auto a = ir::decode(plan_, id);
  if (!a) return Error{op_where(plan_, id), a.error().what};
  return std::visit(ir::Overloaded{
                        [&](const ir::ComputeFwdArgs& c) { return compute_fwd(id, c); },
                        [&](const ir::ComputeBwdArgs& c) { return compute_bwd(id, c); },
                        [&](const ir::MergeArgs& m) { return merge(l, id, m); },
                        [&](const ir::AccumulateArgs& m) { return accumulate(l, id, m); },
                        [&](const ir::PackArgs& k) { return pack(l, id, k); },
                        [&](const ir::CopyArgs& c) { return copy(l, id, c); },
                        [&](const ir::SendArgs&) {
                          return Status(Error{op_where(plan_, id), "not a local op"});
                        },
                        [&](const ir::RecvArgs&) {
                          return Status(Error{op_where(plan_, id), "not a local op"});
                        },
                    },
                    *a);
}

Status PlanRunner::local_buffers(OpId id, std::initializer_list<ir::BufferId> bufs) const {
  for (ir::BufferId b : bufs)
    if (dev_[b].root == ir::kNone || buffers_[std::size_t(dev_[b].root)] == nullptr)
      return Error{op_where(plan_, id), fmt::format("buffer {} is not on this rank", b)};
  return {};
}

Status PlanRunner::same_region(OpId id, ir::BufferId a, ir::BufferId b, const char* what) const {
  if (dev_[a].region == dev_[b].region) return {};
  return Error{op_where(plan_, id), fmt::format("{}: {} and {} hold different regions", what,
                                                ir::buffer_label(plan_, a), ir::buffer_label(plan_, b))};
}

Status PlanRunner::compute_fwd(OpId id, const ir::ComputeFwdArgs& a) {
  CHARM_TRY(local_buffers(id, {a.q, a.kv, a.out}));
  BlockAttention* attn = attn_[std::size_t(id)];
  if (attn == nullptr) return Error{op_where(plan_, id), "internal: no attention kernels for this op"};
  for (const ComputeBlock& k : blocks_[std::size_t(id)].blocks)
    CHARM_TRY(attn->fwd(dat(a.q, k.x, 0), dat(a.kv, k.y, 0), dat(a.kv, k.y, 1), vis_ + k.mask, f32(a.out, k.x, 0),
                        f32(a.out, k.x, 1)));
  return {};
}

Status PlanRunner::compute_bwd(OpId id, const ir::ComputeBwdArgs& a) {
  CHARM_TRY(local_buffers(id, {a.qbundle, a.kv, a.dq, a.dkv}));
  BlockAttention* attn = attn_[std::size_t(id)];
  if (attn == nullptr) return Error{op_where(plan_, id), "internal: no attention kernels for this op"};
  for (const ComputeBlock& k : blocks_[std::size_t(id)].blocks)
    CHARM_TRY(attn->bwd(dat(a.qbundle, k.x, 0), dat(a.qbundle, k.x, 1), f32(a.qbundle, k.x, 2), f32(a.qbundle, k.x, 3),
                        dat(a.kv, k.y, 0), dat(a.kv, k.y, 1), vis_ + k.mask, f32(a.dq, k.x, 0), f32(a.dkv, k.y, 0),
                        f32(a.dkv, k.y, 1)));
  return {};
}

Status PlanRunner::merge(Lane& l, OpId id, const ir::MergeArgs& a) {
  CHARM_TRY(local_buffers(id, {a.partial, a.acc}));
  CHARM_TRY(same_region(id, a.partial, a.acc, "merges a partial into another output"));
  const DeviceBuffer& d = dev_[a.acc];
  const ShardShape& bs = d.block;
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x)
    CHARM_TRY(merge_out(f32(a.partial, x, 0), f32(a.partial, x, 1), false, f32(a.acc, x, 0), f32(a.acc, x, 1), bs.batch,
                        bs.tokens, bs.heads, bs.head_dim, l.cs));
  return {};
}

Status PlanRunner::accumulate(Lane& l, OpId id, const ir::AccumulateArgs& a) {
  CHARM_TRY(local_buffers(id, {a.partial, a.acc}));
  CHARM_TRY(same_region(id, a.partial, a.acc, "adds a gradient to another region"));
  const DeviceBuffer& d = dev_[a.acc];
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x)
    for (std::size_t s = 0; s < d.layout.sections.size(); ++s)
      CHARM_TRY(add_f32(f32(a.partial, x, int(s)), f32(a.acc, x, int(s)), d.layout.sections[s].elems, l.cs));
  return {};
}

Status PlanRunner::pack(Lane& l, OpId id, const ir::PackArgs& a) {
  CHARM_TRY(local_buffers(id, {a.q, a.dout, a.out, a.qbundle}));
  for (ir::BufferId b : {a.q, a.dout, a.out})
    CHARM_TRY(same_region(id, b, a.qbundle, "packs tensors of another region into the bundle"));
  const DeviceBuffer& d = dev_[a.qbundle];
  const ShardShape& bs = d.block;
  const auto dtype = plan_.workload.dtype;
  const std::size_t data_bytes = std::size_t(bs.q_elems()) * ir::dtype_size(dtype);
  for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x) {
    CHARM_CUDA_TRY(cudaMemcpyAsync(dat(a.qbundle, x, 0), dat(a.q, x, 0), data_bytes, cudaMemcpyDeviceToDevice, l.cs));
    CHARM_CUDA_TRY(
        cudaMemcpyAsync(dat(a.qbundle, x, 1), dat(a.dout, x, 0), data_bytes, cudaMemcpyDeviceToDevice, l.cs));
    CHARM_CUDA_TRY(cudaMemcpyAsync(dat(a.qbundle, x, 2), dat(a.out, x, 1), std::size_t(bs.lse_elems()) * sizeof(float),
                                   cudaMemcpyDeviceToDevice, l.cs));
    CHARM_TRY(bundle_delta(dtype, dat(a.dout, x, 0), f32(a.out, x, 0), f32(a.qbundle, x, 3), bs.batch, bs.tokens,
                           bs.heads, bs.head_dim, l.cs));
  }
  return {};
}

Status PlanRunner::copy(Lane& l, OpId id, const ir::CopyArgs& a) {
  CHARM_TRY(local_buffers(id, {a.src, a.dst}));
  const DeviceBuffer &s = dev_[a.src], &d = dev_[a.dst];
  const BufKind kind = plan_.buffer(a.src).kind;
  if (plan_.buffer(a.dst).kind != kind || (!s.region.contains(d.region) && !d.region.contains(s.region)))
    return Error{op_where(plan_, id),
                 fmt::format("copies between {} and {}, which are of other kinds or neither of whose regions "
                             "contains the other",
                             ir::buffer_label(plan_, a.src), ir::buffer_label(plan_, a.dst))};
  if (s.region == d.region) {
    CHARM_CUDA_TRY(cudaMemcpyAsync(base(a.dst), base(a.src), d.bytes(), cudaMemcpyDeviceToDevice, l.cs));
    return {};
  }
  const char* from = base(a.src);
  char* to = base(a.dst);
  for (const Copy2D& c : region_copies(plan_.workload, plan_.ranks, plan_.parts, kind, s, d))
    CHARM_CUDA_TRY(cudaMemcpy2DAsync(to + c.dst, c.dst_pitch, from + c.src, c.src_pitch, c.width, c.height,
                                     cudaMemcpyDeviceToDevice, l.cs));
  return {};
}

}  // namespace charm::rt::cuda
