// The CUDA timer of `charm bench-kernels`: runtime/cuda BlockAttention on one GPU, CUDA events
// around each call, the median of the timed calls.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cuda/block_attention.hpp"
#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/cuda_raii.hpp"
#include "runtime/cuda/kernels.hpp"
#include "tools/bench_kernels.hpp"

namespace charm::cli {

namespace {

namespace cu = rt::cuda;

Expected<double> time_on_device(const KernelBenchSpec& spec, const calib::KernelTime& row) {
  const auto count = cu::device_count();
  if (!count) return count.error();
  if (*count == 0) return Error{"--backend", "cuda: no CUDA device on this machine"};
  if (spec.device < 0 || spec.device >= *count)
    return Error{"--device", fmt::format("must be in [0, {}], got {}", *count - 1, spec.device)};
  CHARM_CUDA_TRY(cudaSetDevice(spec.device));
  const auto& w = row.workload;
  const std::int64_t tq = row.q_tokens, tk = row.kv_tokens;
  const auto nq = std::size_t(w.batch * tq * w.heads * w.head_dim);
  const auto nk = std::size_t(w.batch * tk * w.kv_heads * w.head_dim);
  const auto nl = std::size_t(w.batch * w.heads * tq);
  const std::size_t es = ir::dtype_size(w.dtype);
  cu::Stream s;
  CHARM_CUDA_TRY(cudaStreamCreateWithFlags(s.out(), cudaStreamNonBlocking));
  cu::DeviceMem<char> q, k, v, dout;
  cu::DeviceMem<float> stage, o, dq, dk, dv, lse, delta;
  cu::DeviceMem<int> vis;
  CHARM_CUDA_TRY(cudaMalloc(q.out(), nq * es));
  CHARM_CUDA_TRY(cudaMalloc(dout.out(), nq * es));
  CHARM_CUDA_TRY(cudaMalloc(k.out(), nk * es));
  CHARM_CUDA_TRY(cudaMalloc(v.out(), nk * es));
  CHARM_CUDA_TRY(cudaMalloc(stage.out(), std::max(nq, nk) * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(o.out(), nq * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(dq.out(), nq * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(dk.out(), nk * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(dv.out(), nk * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(lse.out(), nl * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(delta.out(), nl * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(vis.out(), std::size_t(tq) * sizeof(int)));
  // Inputs: a smooth pattern in [-1, 1] (values do not change a GEMM's time).
  std::vector<float> h(std::max(nq, nk));
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = float(std::sin(0.37 * double(i % 9973)));
  CHARM_CUDA_TRY(cudaMemcpy(stage.get(), h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHARM_TRY(cu::convert_from_f32(w.dtype, stage.get(), q.get(), std::int64_t(nq), s));
  CHARM_TRY(cu::convert_from_f32(w.dtype, stage.get(), dout.get(), std::int64_t(nq), s));
  CHARM_TRY(cu::convert_from_f32(w.dtype, stage.get(), k.get(), std::int64_t(nk), s));
  CHARM_TRY(cu::convert_from_f32(w.dtype, stage.get(), v.get(), std::int64_t(nk), s));
  // Query i of a causal (diagonal) block sees keys 0..i; of a full block, every key.
  std::vector<int> counts(static_cast<std::size_t>(tq));
  for (std::int64_t i = 0; i < tq; ++i) counts[std::size_t(i)] = row.causal ? int(i + 1) : int(tk);
  CHARM_CUDA_TRY(cudaMemcpy(vis.get(), counts.data(), counts.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHARM_TRY(cu::fill_f32(lse.get(), std::int64_t(nl), std::log(float(tk)), s));
  CHARM_TRY(cu::fill_f32(delta.get(), std::int64_t(nl), 0.0f, s));
  CHARM_TRY(cu::fill_f32(o.get(), std::int64_t(nq), 0.0f, s));
  auto attn = cu::BlockAttention::create(
      w.dtype, {w.batch, w.heads, w.kv_heads, w.head_dim, tq, tk, float(1.0 / std::sqrt(double(w.head_dim)))}, s);
  if (!attn) return attn.error();
  const bool fwd = w.pass == ir::PassKind::Fwd;
  auto once = [&]() -> Status {
    if (fwd) {
      // An empty accumulator each time (lse -inf), so every call does the same work.
      CHARM_TRY(cu::fill_f32(lse.get(), std::int64_t(nl), -INFINITY, s));
      return (*attn)->fwd(q.get(), k.get(), v.get(), vis.get(), o.get(), lse.get());
    }
    return (*attn)->bwd(q.get(), dout.get(), lse.get(), delta.get(), k.get(), v.get(), vis.get(), dq.get(), dk.get(),
                        dv.get());
  };
  for (int i = 0; i < std::max(1, spec.warmup); ++i) CHARM_TRY(once());  // cuBLAS heuristics, module load
  CHARM_CUDA_TRY(cudaStreamSynchronize(s));
  cu::Event e0, e1;
  CHARM_CUDA_TRY(cudaEventCreate(e0.out()));
  CHARM_CUDA_TRY(cudaEventCreate(e1.out()));
  std::vector<double> ms;
  for (int i = 0; i < spec.repeats; ++i) {
    CHARM_CUDA_TRY(cudaEventRecord(e0, s));
    CHARM_TRY(once());
    CHARM_CUDA_TRY(cudaEventRecord(e1, s));
    CHARM_CUDA_TRY(cudaEventSynchronize(e1));
    float t = 0;
    CHARM_CUDA_TRY(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(double(t));
  }
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  return n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

}  // namespace

Expected<double> time_cuda_kernel(const KernelBenchSpec& spec, const calib::KernelTime& row) {
  return time_on_device(spec, row);
}

}  // namespace charm::cli
