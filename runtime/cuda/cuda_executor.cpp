#include "runtime/cuda/cuda_executor.hpp"

#include <fmt/format.h>

#include "runtime/buffer_store.hpp"
#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/plan_runner.hpp"
#include "scheduler/ir/buffer_rules.hpp"

namespace charm::rt::cuda {

Expected<int> device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();  // clear the sticky error of a failed probe
    return Error{"", fmt::format("no CUDA device was found ({})",
                                 e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0")};
  }
  return n;
}

Expected<std::string> device_description(int device) {
  cudaDeviceProp p{};
  CHARM_CUDA_TRY(cudaGetDeviceProperties(&p, device));
  return fmt::format("{} (sm_{}{}, {} SMs, {:.0f} GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                     double(p.totalGlobalMem) / double(1ull << 30));
}

Status supports(const ir::Plan& plan) {
  if (plan.symmetry.active())
    return Error{"plan", "a quotient plan holds one class of ranks: executors run full plans"};
  if (plan.workload.position_mask())
    return Error{Field::Mask,
                 fmt::format("{}: the GPU kernels take full and causal masks; documents and windows run on "
                             "the threads and mpi backends",
                             plan.workload.mask_text())};
  // Region plans run (views, ranged computes, region copies); what no executor can store is
  // refused here, before any device or MPI call, with the buffer named.
  for (ir::BufferId b = 0; b < ir::BufferId(plan.buffers().size()); ++b) {
    const auto& buf = plan.buffer(b);
    if (buf.rank < 0 || buf.rank >= plan.ranks)
      return Error{"cuda",
                   fmt::format("buffer {} belongs to rank {}, outside the plan's {} ranks", b, buf.rank, plan.ranks)};
    CHARM_TRY(ir::check_buffer(plan, b));
  }
  return {};
}

namespace {
Expected<CudaRunResult> run_local(const ir::Plan& plan, const GlobalTensors& in, const CudaRunOptions& opt) {
  CHARM_TRY(supports(plan));
  auto count = device_count();
  if (!count) return count.error();
  if (opt.device < 0 || opt.device >= *count)
    return Error{Field::Device, fmt::format("device {} does not exist ({} found)", opt.device, *count)};
  CHARM_CUDA_TRY(cudaSetDevice(opt.device));
  std::vector<ir::RankId> all;
  for (int r = 0; r < plan.ranks; ++r) all.push_back(r);
  auto runner = PlanRunner::create(plan, all, opt, {});
  if (!runner) return runner.error();
  auto& pr = **runner;
  for (int i = 0; i <= std::max(0, opt.warmup); ++i) {
    CHARM_TRY(pr.init_buffers(in));
    CHARM_TRY(pr.run());
  }
  CudaRunResult res;
  res.run.time_ms = pr.makespan_ms();
  res.enqueue_ms = pr.enqueue_ms();
  res.start_ms = pr.start_ms();
  res.end_ms = pr.end_ms();
  for (int r = 0; r < plan.ranks; ++r) {
    auto o = pr.outputs(r);
    if (!o) return o.error();
    assemble(plan, r, *o, res.run.out);
    res.run.peak_bytes = std::max(res.run.peak_bytes, pr.rank_bytes(r));
  }
  return res;
}
}  // namespace

Expected<CudaRunResult> run_cuda_local(const ir::ValidatedPlan& plan, const GlobalTensors& in,
                                       const CudaRunOptions& opt) {
  return run_with_faults(plan, opt.faults, [&](const ir::Plan& p) { return run_local(p, in, opt); });
}

}  // namespace charm::rt::cuda
