// A backward-only run's inputs with their forward results computed on the GPU: one
// BlockAttention over the whole sequence, where the host's fp64 reference (runtime/reference.hpp)
// would spend minutes to hours at long sequences (B H S^2 D multiply-adds on one core).
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "runtime/cuda/block_attention.hpp"
#include "runtime/cuda/cuda_check.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/cuda_raii.hpp"
#include "runtime/cuda/kernels.hpp"

namespace charm::rt::cuda {

namespace {

/// The fp32 host tensor `h` into `dst` on the device, in `t` (through the fp32 `stage`).
Status upload(ir::DType t, const std::vector<float>& h, float* stage, void* dst, cudaStream_t s) {
  CHARM_CUDA_TRY(cudaMemcpyAsync(stage, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  return convert_from_f32(t, stage, dst, std::int64_t(h.size()), s);
}

}  // namespace

Status dense_forward(const ir::Workload& w, GlobalTensors& g, int device) {
  if (w.position_mask())
    return Error{"dense_forward", "masks by position (documents, sliding windows) are the host reference's"};
  CHARM_CUDA_TRY(cudaSetDevice(device));
  const std::int64_t S = w.seq;
  const auto nq = std::size_t(w.batch * S * w.heads * w.head_dim);
  const auto nk = std::size_t(w.batch * S * w.kv_heads * w.head_dim);
  const auto nl = std::size_t(w.batch * w.heads * S);
  const std::size_t es = ir::dtype_size(w.dtype);
  Stream s;
  CHARM_CUDA_TRY(cudaStreamCreateWithFlags(s.out(), cudaStreamNonBlocking));
  DeviceMem<char> q, k, v;
  DeviceMem<float> stage, o, lse;
  DeviceMem<int> vis;
  CHARM_CUDA_TRY(cudaMalloc(q.out(), nq * es));
  CHARM_CUDA_TRY(cudaMalloc(k.out(), nk * es));
  CHARM_CUDA_TRY(cudaMalloc(v.out(), nk * es));
  CHARM_CUDA_TRY(cudaMalloc(stage.out(), std::max(nq, nk) * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(o.out(), nq * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(lse.out(), nl * sizeof(float)));
  CHARM_CUDA_TRY(cudaMalloc(vis.out(), std::size_t(S) * sizeof(int)));
  CHARM_TRY(upload(w.dtype, g.q, stage.get(), q.get(), s));
  CHARM_TRY(upload(w.dtype, g.k, stage.get(), k.get(), s));
  CHARM_TRY(upload(w.dtype, g.v, stage.get(), v.get(), s));
  // Query i (natural order) sees keys 0..i under the causal mask, every key otherwise.
  std::vector<int> counts(static_cast<std::size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) counts[std::size_t(i)] = w.causal ? int(i + 1) : int(S);
  CHARM_CUDA_TRY(cudaMemcpyAsync(vis.get(), counts.data(), counts.size() * sizeof(int), cudaMemcpyHostToDevice, s));
  CHARM_TRY(fill_f32(o.get(), std::int64_t(nq), 0.0f, s));
  CHARM_TRY(fill_f32(lse.get(), std::int64_t(nl), -INFINITY, s));
  auto attn = BlockAttention::create(
      w.dtype, {w.batch, w.heads, w.kv_heads, w.head_dim, S, S, float(1.0 / std::sqrt(double(w.head_dim)))}, s);
  if (!attn) return attn.error();
  CHARM_TRY((*attn)->fwd(q.get(), k.get(), v.get(), vis.get(), o.get(), lse.get()));
  g.out.resize(nq);
  g.lse.resize(nl);
  CHARM_CUDA_TRY(cudaMemcpyAsync(g.out.data(), o.get(), nq * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHARM_CUDA_TRY(cudaMemcpyAsync(g.lse.data(), lse.get(), nl * sizeof(float), cudaMemcpyDeviceToHost, s));
  CHARM_CUDA_TRY(cudaStreamSynchronize(s));
  return {};
}

Expected<GlobalTensors> device_plan_inputs(const ir::Workload& w, std::uint64_t seed, int device) {
  if (w.pass != ir::PassKind::Bwd || w.position_mask()) return plan_inputs(w, seed);
  GlobalTensors g = make_inputs(w, seed);
  CHARM_TRY(dense_forward(w, g, device));
  return g;
}

}  // namespace charm::rt::cuda
