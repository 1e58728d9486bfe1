#include "runtime/cuda/kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "runtime/cuda/cuda_check.hpp"

// Every kernel uses 256 threads per block. Elementwise kernels walk a grid-stride
// loop over 64-bit indices; row kernels use one block (long rows) or one warp
// (rows of head_dim) per row. Arithmetic is fp32 with accurate expf/logf.

namespace charm::rt::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr float kNegInf = -__builtin_huge_valf();

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <class T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

/// Calls f(T{}) with T the device type of `t`.
template <class F>
Status dispatch(ir::DType t, F&& f) {
  switch (t) {
  case ir::DType::BF16:
    return f(__nv_bfloat16{});
  case ir::DType::FP16:
    return f(__half{});
  case ir::DType::FP32:
    return f(float{});
  }
  return Error{"cuda", "unknown dtype"};
}

unsigned grid_for(std::int64_t n, std::int64_t per_block) {
  const std::int64_t blocks = (n + per_block - 1) / per_block;
  return unsigned(std::min<std::int64_t>(blocks, 1 << 20));  // the rest by grid stride
}

__device__ __forceinline__ std::int64_t global_index() { return std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ std::int64_t grid_stride() { return std::int64_t(gridDim.x) * blockDim.x; }

struct MaxOp {
  static constexpr float kIdentity = kNegInf;
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  static constexpr float kIdentity = 0.0f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
/// A reduction over a block of kThreads; every thread gets the result.
template <class Op>
__device__ float block_reduce(float v, Op op) {
  __shared__ float sh[kWarpsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_reduce(v, op);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = lane < kWarpsPerBlock ? sh[lane] : Op::kIdentity;
  v = warp_reduce(v, op);
  __syncthreads();  // sh may be reused by the next call
  return v;
}
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp{}); }
__device__ float block_max(float v) { return block_reduce(v, MaxOp{}); }
__device__ float block_sum(float v) { return block_reduce(v, SumOp{}); }

template <class T>
__global__ void convert_from_f32_kernel(const float* __restrict__ src, T* __restrict__ dst, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = from_f32<T>(src[i]);
}
template <class T>
__global__ void convert_to_f32_kernel(const T* __restrict__ src, float* __restrict__ dst, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = to_f32(src[i]);
}
__global__ void fill_f32_kernel(float* __restrict__ dst, std::int64_t n, float value) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) dst[i] = value;
}
__global__ void add_f32_kernel(const float* __restrict__ src, float* __restrict__ dst, std::int64_t n) {
  for (std::int64_t i = global_index(); i < n; i += grid_stride()) dst[i] += src[i];
}

template <class T>
__global__ void pack_heads_kernel(const T* __restrict__ src, T* __restrict__ dst, std::int64_t tokens, std::int64_t hx,
                                  std::int64_t d, std::int64_t n) {
  for (std::int64_t e = global_index(); e < n; e += grid_stride()) {
    const std::int64_t k = e % d, t = (e / d) % tokens, h = (e / (d * tokens)) % hx, b = e / (d * tokens * hx);
    dst[e] = src[((b * tokens + t) * hx + h) * d + k];
  }
}

__global__ void add_heads_to_tokens_kernel(const float* __restrict__ src, float* __restrict__ dst, std::int64_t tokens,
                                           std::int64_t hx, std::int64_t d, std::int64_t n) {
  for (std::int64_t e = global_index(); e < n; e += grid_stride()) {
    const std::int64_t k = e % d, h = (e / d) % hx, t = (e / (d * hx)) % tokens, b = e / (d * hx * tokens);
    dst[e] += src[((b * hx + h) * tokens + t) * d + k];
  }
}

/// One warp per row r of [B, H, T], grid-stride over rows.
__global__ void merge_out_kernel(const float* __restrict__ o_part, const float* __restrict__ lse_part,
                                 bool part_head_major, float* __restrict__ o_acc, float* __restrict__ lse_acc,
                                 std::int64_t tokens, std::int64_t heads, std::int64_t d, std::int64_t rows) {
  const int lane = threadIdx.x & 31;
  const std::int64_t step = std::int64_t(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t r = std::int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); r < rows; r += step) {
    const float l2 = lse_part[r];
    if (l2 == kNegInf) continue;  // an empty partial changes nothing (uniform across the warp)
    const std::int64_t t = r % tokens, h = (r / tokens) % heads, b = r / (tokens * heads);
    const float l1 = lse_acc[r];
    float* o1 = o_acc + ((b * tokens + t) * heads + h) * d;
    const float* o2 =
        o_part + (part_head_major ? ((b * heads + h) * tokens + t) * d : ((b * tokens + t) * heads + h) * d);
    float l = l2, w1 = 0.0f, w2 = 1.0f;
    if (l1 != kNegInf) {
      const float hi = fmaxf(l1, l2), lo = fminf(l1, l2);
      l = hi + log1pf(expf(lo - hi));
      w1 = expf(l1 - l);
      w2 = expf(l2 - l);
    }
    for (std::int64_t k = lane; k < d; k += 32) o1[k] = l1 == kNegInf ? o2[k] : w1 * o1[k] + w2 * o2[k];
    __syncwarp();  // every lane read lse_acc[r] before it changes
    if (lane == 0) lse_acc[r] = l;
  }
}

template <class T>
__global__ void bundle_delta_kernel(const T* __restrict__ dout, const float* __restrict__ o, float* __restrict__ delta,
                                    std::int64_t tokens, std::int64_t heads, std::int64_t d, std::int64_t rows) {
  const int lane = threadIdx.x & 31;
  const std::int64_t step = std::int64_t(gridDim.x) * kWarpsPerBlock;
  for (std::int64_t r = std::int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5); r < rows; r += step) {
    const std::int64_t t = r % tokens, h = (r / tokens) % heads, b = r / (tokens * heads);
    const std::int64_t base = ((b * tokens + t) * heads + h) * d;
    float s = 0.0f;
    for (std::int64_t k = lane; k < d; k += 32) s += to_f32(dout[base + k]) * o[base + k];
    s = warp_sum(s);  // every lane of the warp takes part: r is uniform across it
    if (lane == 0) delta[r] = s;
  }
}

/// One block per tile row.
template <class T>
__global__ void softmax_rows_kernel(const float* __restrict__ s, T* __restrict__ p, float* __restrict__ lse,
                                    const int* __restrict__ vis, ChunkRows c) {
  const std::int64_t row = blockIdx.x;
  const std::int64_t pi = row / c.nr, gr = c.r0 + row % c.nr;
  const int n = vis[gr % c.tq];
  const float* srow = s + row * c.tk;
  T* prow = p + row * c.tk;
  float m = kNegInf;
  for (std::int64_t j = threadIdx.x; j < n; j += kThreads) m = fmaxf(m, srow[j]);
  m = block_max(m);
  float l = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n; j += kThreads) l += expf(srow[j] - m);
  l = block_sum(l);
  const float row_lse = n > 0 ? m + logf(l) : kNegInf;
  for (std::int64_t j = threadIdx.x; j < c.tk; j += kThreads)
    prow[j] = from_f32<T>(j < n ? expf(srow[j] - row_lse) : 0.0f);
  if (threadIdx.x == 0) lse[(c.p0 + pi) * c.rows_per_pair + gr] = row_lse;
}

template <class T>
__global__ void softmax_bwd_kernel(const float* __restrict__ s, const float* __restrict__ dp,
                                   const float* __restrict__ lse, const float* __restrict__ delta,
                                   const int* __restrict__ vis, T* __restrict__ p, T* __restrict__ ds, ChunkRows c,
                                   std::int64_t n) {
  for (std::int64_t e = global_index(); e < n; e += grid_stride()) {
    const std::int64_t row = e / c.tk, j = e % c.tk;
    const std::int64_t pi = row / c.nr, gr = c.r0 + row % c.nr;
    const std::int64_t li = (c.p0 + pi) * c.rows_per_pair + gr;
    const float l = lse[li];
    const int visible = l == kNegInf ? 0 : vis[gr % c.tq];
    float pv = 0.0f, dsv = 0.0f;
    if (j < visible) {
      pv = expf(s[e] - l);
      dsv = pv * (dp[e] - delta[li]);
    }
    p[e] = from_f32<T>(pv);
    ds[e] = from_f32<T>(dsv);
  }
}

}  // namespace

Status convert_from_f32(ir::DType t, const float* src, void* dst, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return {};
  return dispatch(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    convert_from_f32_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(src, static_cast<T*>(dst), n);
    CHARM_CUDA_TRY(cudaGetLastError());
    return {};
  });
}

Status convert_to_f32(ir::DType t, const void* src, float* dst, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return {};
  return dispatch(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    convert_to_f32_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(src), dst, n);
    CHARM_CUDA_TRY(cudaGetLastError());
    return {};
  });
}

Status fill_f32(float* dst, std::int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return {};
  fill_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dst, n, value);
  CHARM_CUDA_TRY(cudaGetLastError());
  return {};
}

Status add_f32(const float* src, float* dst, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return {};
  add_f32_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(src, dst, n);
  CHARM_CUDA_TRY(cudaGetLastError());
  return {};
}

Status pack_heads(ir::DType t, const void* src, void* dst, std::int64_t b, std::int64_t tokens, std::int64_t hx,
                  std::int64_t d, cudaStream_t stream) {
  const std::int64_t n = b * tokens * hx * d;
  if (n <= 0) return {};
  return dispatch(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    pack_heads_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const T*>(src),
                                                                         static_cast<T*>(dst), tokens, hx, d, n);
    CHARM_CUDA_TRY(cudaGetLastError());
    return {};
  });
}

Status add_heads_to_tokens(const float* src, float* dst, std::int64_t b, std::int64_t tokens, std::int64_t hx,
                           std::int64_t d, cudaStream_t stream) {
  const std::int64_t n = b * tokens * hx * d;
  if (n <= 0) return {};
  add_heads_to_tokens_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(src, dst, tokens, hx, d, n);
  CHARM_CUDA_TRY(cudaGetLastError());
  return {};
}

Status merge_out(const float* o_part, const float* lse_part, bool part_head_major, float* o_acc, float* lse_acc,
                 std::int64_t b, std::int64_t tokens, std::int64_t h, std::int64_t d, cudaStream_t stream) {
  const std::int64_t rows = b * h * tokens;
  if (rows <= 0) return {};
  merge_out_kernel<<<grid_for(rows, kWarpsPerBlock), kThreads, 0, stream>>>(o_part, lse_part, part_head_major, o_acc,
                                                                            lse_acc, tokens, h, d, rows);
  CHARM_CUDA_TRY(cudaGetLastError());
  return {};
}

Status bundle_delta(ir::DType t, const void* dout, const float* o, float* delta, std::int64_t b, std::int64_t tokens,
                    std::int64_t h, std::int64_t d, cudaStream_t stream) {
  const std::int64_t rows = b * h * tokens;
  if (rows <= 0) return {};
  return dispatch(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    bundle_delta_kernel<T><<<grid_for(rows, kWarpsPerBlock), kThreads, 0, stream>>>(static_cast<const T*>(dout), o,
                                                                                    delta, tokens, h, d, rows);
    CHARM_CUDA_TRY(cudaGetLastError());
    return {};
  });
}

Status softmax_rows(ir::DType t, const float* s, void* p, float* lse, const int* vis, const ChunkRows& c,
                    cudaStream_t stream) {
  const std::int64_t rows = c.np * c.nr;
  if (rows <= 0) return {};
  if (rows > 0x7fffffff) return Error{"cuda", "too many rows in one score tile"};
  return dispatch(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    softmax_rows_kernel<T><<<unsigned(rows), kThreads, 0, stream>>>(s, static_cast<T*>(p), lse, vis, c);
    CHARM_CUDA_TRY(cudaGetLastError());
    return {};
  });
}

Status softmax_bwd_rows(ir::DType t, const float* s, const float* dp, const float* lse, const float* delta,
                        const int* vis, void* p, void* ds, const ChunkRows& c, cudaStream_t stream) {
  const std::int64_t n = c.np * c.nr * c.tk;
  if (n <= 0) return {};
  return dispatch(t, [&](auto tag) -> Status {
    using T = decltype(tag);
    softmax_bwd_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(s, dp, lse, delta, vis, static_cast<T*>(p),
                                                                          static_cast<T*>(ds), c, n);
    CHARM_CUDA_TRY(cudaGetLastError());
    return {};
  });
}

}  // namespace charm::rt::cuda
