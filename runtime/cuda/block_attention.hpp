#pragma once
// BlockAttention: attention of one (query shard, key/value shard) block on the
// GPU, forward and backward, with the math of runtime/cpu_attention.hpp.
//
// Inputs are in the workload dtype (bf16, fp16 or fp32), accumulators fp32.
// Q, dO, K, V are first packed head-major, so that for each pair p = (batch,
// kv head) the queries of the GQA group form one (group*tq) x D matrix and
// every product is one strided-batched cuBLAS GEMM over pairs:
//
//   forward   S = scale Q K^T (fp32)  ->  P = exp(S - lse) (dtype)  ->  O = P V (fp32)
//             then (O, lse) is merged into the accumulator (kernels.hpp merge_out)
//   backward  S = scale Q K^T, dP = dO V^T (fp32)  ->  P, dS = P (dP - D) (dtype)
//             dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO (fp32), added to the accumulators
//
// The mask is the CPU's rule: query i of the block sees the first vis[i] keys
// (positions ascend within a shard), vis computed on the host from global token
// positions. The score tiles are [rows, tk] fp32; rows are chunked so that the
// tiles fit `tile_budget_bytes` (whole pairs per chunk when they fit, else row
// slices of one pair, dK/dV accumulating over the slices with beta = 1).
// Every call is enqueued on the stream given at creation; nothing synchronises.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_raii.hpp"
#include "runtime/cuda/kernels.hpp"

namespace charm::rt::cuda {

struct BlockDims {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, head_dim = 1;
  std::int64_t tq = 1, tk = 1;  // query and key tokens of the block
  float scale = 1.0f;
};

class BlockAttention {
 public:
  static constexpr std::size_t kDefaultTileBudget = std::size_t(256) << 20;

  [[nodiscard]] static Expected<std::unique_ptr<BlockAttention>>
  create(ir::DType dtype, const BlockDims& dims, cudaStream_t stream,
         std::size_t tile_budget_bytes = kDefaultTileBudget);
  ~BlockAttention();
  BlockAttention(const BlockAttention&) = delete;
  BlockAttention& operator=(const BlockAttention&) = delete;

  /// (o_acc, lse_acc) := merge((o_acc, lse_acc), attention(q, k, v)); q [B,tq,H,D], k, v [B,tk,Hkv,D] in dtype.
  [[nodiscard]] Status fwd(const void* q, const void* k, const void* v, const int* vis, float* o_acc, float* lse_acc);
  /// dq += dQ, dk += dK, dv += dV (fp32, token-major) from q, dout (dtype) and the final lse, delta [B,H,tq].
  [[nodiscard]] Status bwd(const void* q, const void* dout, const float* lse, const float* delta, const void* k,
                           const void* v, const int* vis, float* dq, float* dk, float* dv);

  [[nodiscard]] std::size_t workspace_bytes() const { return ws_bytes_; }
  [[nodiscard]] std::size_t chunks() const { return chunks_.size(); }

 private:
  BlockAttention() = default;
  [[nodiscard]] Status gemm(cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n, std::int64_t k,
                            float alpha, const void* a, std::int64_t lda, long long stride_a, const void* b,
                            std::int64_t ldb, long long stride_b, float beta, float* c, std::int64_t ldc,
                            long long stride_c, std::int64_t batch);
  /// Q, K and V into the workspace, heads outermost (both passes start so).
  [[nodiscard]] Status pack_qkv(const void* q, const void* k, const void* v);
  /// S = scale Q K^T of chunk c into s_ (both passes).
  [[nodiscard]] Status scores(const ChunkRows& c);
  [[nodiscard]] const char* data(const void* base, std::int64_t elems) const {
    return static_cast<const char*>(base) + elems * std::int64_t(esize_);
  }

  ir::DType dtype_ = ir::DType::BF16;
  std::size_t esize_ = 2;
  BlockDims d_;
  std::int64_t group_ = 1, pairs_ = 1, rows_per_pair_ = 1;
  std::vector<ChunkRows> chunks_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  DeviceMem<char> ws_;
  std::size_t ws_bytes_ = 0;
  // Views into ws_.
  void *qh_ = nullptr, *doh_ = nullptr, *kh_ = nullptr, *vh_ = nullptr, *p_ = nullptr, *ds_ = nullptr;
  float *s_ = nullptr, *dp_ = nullptr, *oh_ = nullptr, *lse_ = nullptr, *dkh_ = nullptr, *dvh_ = nullptr;
};

}  // namespace charm::rt::cuda
