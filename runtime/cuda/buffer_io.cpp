// PlanRunner's buffer addresses, the upload of its inputs (init_buffers) and the download of its results (outputs).

#include <fmt/format.h>

#include <limits>

#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/kernels.hpp"
#include "runtime/cuda/plan_runner.hpp"
#include "scheduler/ir/buffer_rules.hpp"

namespace charm::rt::cuda {

using ir::BufKind;

char* PlanRunner::base(ir::BufferId b) const {
  const DeviceBuffer& d = dev_[b];
  return static_cast<char*>(buffers_[std::size_t(d.root)]) + d.offset;
}

char* PlanRunner::section(ir::BufferId b, ir::RankId x, int sec) const {
  const DeviceBuffer& d = dev_[b];
  return base(b) + d.block_at(x) + d.layout.sections[std::size_t(sec)].offset;
}

char* PlanRunner::wire_section(ir::BufferId b, ir::RankId x, int sec) const {
  const DeviceBuffer& d = dev_[b];
  return static_cast<char*>(wire_[std::size_t(d.root)]) + d.wire_offset +
         std::size_t(x - d.region.owner_begin) * d.wire.bytes + d.wire.sections[std::size_t(sec)].offset;
}

Status PlanRunner::init_buffers(const GlobalTensors& in) {
  const auto fill = input_filler(plan_, in);
  const auto dtype = plan_.workload.dtype;
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    if (buffers_[b] == nullptr) continue;
    const auto& buf = plan_.buffers()[b];
    const DeviceBuffer& d = dev_.buf[b];
    const auto& lay = d.layout;
    if (buf.init == ir::BufInit::Input) {  // one whole shard (ir::check_buffer)
      auto& host = host_inputs_[b];
      if (host.empty()) {
        host.resize(std::size_t(lay.host_elems()));
        CHARM_TRY(fill(buf, host));
      }
      CHARM_CUDA_TRY(cudaMemcpy(staging_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
      std::int64_t at = 0;
      for (std::size_t s = 0; s < lay.sections.size(); ++s) {
        const auto& sec = lay.sections[s];
        char* dst = section(ir::BufferId(b), buf.owner, int(s));
        if (sec.f32)
          CHARM_CUDA_TRY(
              cudaMemcpy(dst, staging_ + at, std::size_t(sec.elems) * sizeof(float), cudaMemcpyDeviceToDevice));
        else
          CHARM_TRY(convert_from_f32(dtype, staging_ + at, dst, sec.elems, nullptr));
        at += sec.elems;
      }
      // The staging area is reused by the next buffer: finish this one first.
      CHARM_CUDA_TRY(cudaDeviceSynchronize());
    } else if (buf.init == ir::BufInit::Zero) {
      // Empty accumulators: zero, except an output's LSE, which is -inf (every owner's block).
      CHARM_CUDA_TRY(cudaMemset(buffers_[b], 0, d.bytes()));
      if (buf.kind == BufKind::Out)
        for (ir::RankId x = d.region.owner_begin; x < d.region.owner_end; ++x)
          CHARM_TRY(fill_f32(f32(ir::BufferId(b), x, 1), lay.sections[1].elems, -std::numeric_limits<float>::infinity(),
                             nullptr));
    }
  }
  CHARM_CUDA_TRY(cudaDeviceSynchronize());
  return {};
}

Expected<RankOutputs> PlanRunner::outputs(ir::RankId rank) {
  RankOutputs o;
  const auto& res = plan_.results()[std::size_t(rank)];
  const auto pass = plan_.workload.pass;
  auto take = [&](ir::BufferId b, BufKind k, int sec, std::vector<float>& dst) -> Status {
    if (b == ir::kNone)
      return Error{fmt::format("rank {}", rank), fmt::format("the plan names no {} result", ir::to_string(k))};
    if (b < 0 || std::size_t(b) >= plan_.buffers().size() || plan_.buffer(b).kind != k ||
        plan_.buffer(b).owner != rank || dev_[b].root == ir::kNone)
      return Error{fmt::format("rank {}", rank),
                   fmt::format("result buffer {} is not this rank's {}", b, ir::to_string(k))};
    if (!ir::is_whole_shard(plan_, b, rank))
      return Error{fmt::format("rank {}", rank),
                   fmt::format("result buffer {} ({}) is not one whole shard", b, ir::buffer_label(plan_, b))};
    const auto& s = dev_[b].layout.sections[std::size_t(sec)];
    dst.resize(std::size_t(s.elems));
    CHARM_CUDA_TRY(cudaMemcpy(dst.data(), section(b, rank, sec), dst.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return {};
  };
  if (pass != ir::PassKind::Bwd) {
    CHARM_TRY(take(res.out, BufKind::Out, 0, o.out));
    CHARM_TRY(take(res.out, BufKind::Out, 1, o.lse));
  }
  if (pass != ir::PassKind::Fwd) {
    CHARM_TRY(take(res.dq, BufKind::Dq, 0, o.dq));
    CHARM_TRY(take(res.dkv, BufKind::Dkv, 0, o.dk));
    CHARM_TRY(take(res.dkv, BufKind::Dkv, 1, o.dv));
  }
  return o;
}

}  // namespace charm::rt::cuda
