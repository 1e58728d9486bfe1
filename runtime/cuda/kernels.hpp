#pragma once
// The project's own CUDA kernels around the cuBLAS GEMMs: dtype conversion,
// head-major packing, merge of partial outputs, gradient accumulation and the
// backward bundle's D. Host-callable launchers: each enqueues on `stream`,
// checks the launch, and does nothing for an empty range.
//
// Layouts as in runtime/cpu_attention.hpp: token-major [B, T, H, D] for Q, O,
// dO, dQ (Hkv heads for K, V, dK, dV); head-major [B, H, T, D] inside the
// attention blocks; LSE and D [B, H, T].

#include <cuda_runtime.h>

#include <cstdint>

#include "scheduler/ir/workload.hpp"
#include "support/expected.hpp"

namespace charm::rt::cuda {

/// dst (dtype) := src (fp32), rounding to nearest.
[[nodiscard]] Status convert_from_f32(ir::DType t, const float* src, void* dst, std::int64_t n, cudaStream_t stream);
/// dst (fp32) := src (dtype).
[[nodiscard]] Status convert_to_f32(ir::DType t, const void* src, float* dst, std::int64_t n, cudaStream_t stream);
[[nodiscard]] Status fill_f32(float* dst, std::int64_t n, float value, cudaStream_t stream);
/// dst += src, fp32.
[[nodiscard]] Status add_f32(const float* src, float* dst, std::int64_t n, cudaStream_t stream);
/// [B, T, Hx, D] (dtype) -> [B, Hx, T, D] (dtype).
[[nodiscard]] Status pack_heads(ir::DType t, const void* src, void* dst, std::int64_t b, std::int64_t tokens,
                                std::int64_t hx, std::int64_t d, cudaStream_t stream);
/// dst [B, T, Hx, D] += src [B, Hx, T, D], fp32.
[[nodiscard]] Status add_heads_to_tokens(const float* src, float* dst, std::int64_t b, std::int64_t tokens,
                                         std::int64_t hx, std::int64_t d, cudaStream_t stream);
/// (o_acc, lse_acc) := merge((o_acc, lse_acc), (o_part, lse_part)) with the CPU's rule
/// (runtime/cpu_attention.cpp merge_out); o_part is head-major when `part_head_major`.
[[nodiscard]] Status merge_out(const float* o_part, const float* lse_part, bool part_head_major, float* o_acc,
                               float* lse_acc, std::int64_t b, std::int64_t tokens, std::int64_t h, std::int64_t d,
                               cudaStream_t stream);
/// delta [B, H, T] = sum_d dout (dtype) * o (fp32), both token-major.
[[nodiscard]] Status bundle_delta(ir::DType t, const void* dout, const float* o, float* delta, std::int64_t b,
                                  std::int64_t tokens, std::int64_t h, std::int64_t d, cudaStream_t stream);

/// Rows of the score tiles of one GEMM chunk (see BlockAttention): pairs
/// [p0, p0 + np) of (batch, kv head), rows [r0, r0 + nr) of each pair's
/// (group * tq) x D query matrix; tiles are [np, nr, tk].
struct ChunkRows {
  std::int64_t p0 = 0, np = 1, r0 = 0, nr = 1;
  std::int64_t tq = 1, tk = 1;
  std::int64_t rows_per_pair = 1;  // group * tq
};

/// Forward softmax of scaled scores s [np, nr, tk]: p = exp(s - lse) (dtype) on
/// the visible prefix vis[query], 0 elsewhere; lse [B, H, tq] of every tile row.
[[nodiscard]] Status softmax_rows(ir::DType t, const float* s, void* p, float* lse, const int* vis, const ChunkRows& c,
                                  cudaStream_t stream);
/// Backward elementwise step: p = exp(s - lse), ds = p * (dp - delta) on the
/// visible prefix (nothing where lse = -inf), 0 elsewhere; p and ds in dtype.
[[nodiscard]] Status softmax_bwd_rows(ir::DType t, const float* s, const float* dp, const float* lse,
                                      const float* delta, const int* vis, void* p, void* ds, const ChunkRows& c,
                                      cudaStream_t stream);

}  // namespace charm::rt::cuda
