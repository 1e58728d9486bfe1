#include "runtime/cuda/block_attention.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "runtime/cuda/cublas_loader.hpp"
#include "runtime/cuda/cuda_check.hpp"

namespace charm::rt::cuda {

namespace {

cudaDataType_t blas_type(ir::DType t) {
  switch (t) {
  case ir::DType::BF16:
    return CUDA_R_16BF;
  case ir::DType::FP16:
    return CUDA_R_16F;
  case ir::DType::FP32:
    return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

std::size_t align_up(std::size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

Expected<std::unique_ptr<BlockAttention>> BlockAttention::create(ir::DType dtype, const BlockDims& dims,
                                                                 cudaStream_t stream, std::size_t tile_budget_bytes) {
  if (dims.batch < 1 || dims.heads < 1 || dims.kv_heads < 1 || dims.head_dim < 1 || dims.tq < 1 || dims.tk < 1 ||
      dims.heads % dims.kv_heads != 0)
    return Error{"cuda", fmt::format("bad block shape B={} H={} Hkv={} D={} tq={} tk={}", dims.batch, dims.heads,
                                     dims.kv_heads, dims.head_dim, dims.tq, dims.tk)};
  std::unique_ptr<BlockAttention> a(new BlockAttention());
  a->dtype_ = dtype;
  a->esize_ = ir::dtype_size(dtype);
  a->d_ = dims;
  a->stream_ = stream;
  a->group_ = dims.heads / dims.kv_heads;
  a->pairs_ = dims.batch * dims.kv_heads;
  a->rows_per_pair_ = a->group_ * dims.tq;

  // Chunks: rows of the score tiles that fit the budget (S, dP fp32; P, dS dtype).
  const std::size_t row_bytes = std::size_t(dims.tk) * (8 + 2 * a->esize_);
  const std::int64_t budget_rows = std::max<std::int64_t>(1, std::int64_t(tile_budget_bytes / row_bytes));
  std::int64_t max_rows = 0;
  if (a->rows_per_pair_ <= budget_rows) {
    const std::int64_t per = std::max<std::int64_t>(1, budget_rows / a->rows_per_pair_);
    for (std::int64_t p0 = 0; p0 < a->pairs_; p0 += per)
      a->chunks_.push_back(
          {p0, std::min(per, a->pairs_ - p0), 0, a->rows_per_pair_, dims.tq, dims.tk, a->rows_per_pair_});
  } else {
    for (std::int64_t p0 = 0; p0 < a->pairs_; ++p0)
      for (std::int64_t r0 = 0; r0 < a->rows_per_pair_; r0 += budget_rows)
        a->chunks_.push_back(
            {p0, 1, r0, std::min(budget_rows, a->rows_per_pair_ - r0), dims.tq, dims.tk, a->rows_per_pair_});
  }
  for (const auto& c : a->chunks_) max_rows = std::max(max_rows, c.np * c.nr);
  for (std::int64_t v : {dims.tk, dims.head_dim, max_rows, a->pairs_})
    if (v > INT_MAX) return Error{"cuda", "block too large for one cuBLAS call"};

  const std::size_t q_elems = std::size_t(dims.batch * dims.heads * dims.tq * dims.head_dim);
  const std::size_t kv_elems = std::size_t(dims.batch * dims.kv_heads * dims.tk * dims.head_dim);
  const std::size_t tile = std::size_t(max_rows) * std::size_t(dims.tk);
  const std::size_t lse_elems = std::size_t(dims.batch * dims.heads * dims.tq);
  // Offsets of the views: data tensors, tiles, fp32 results.
  std::size_t off = 0;
  auto take = [&off](std::size_t bytes) {
    const std::size_t at = off;
    off += align_up(bytes);
    return at;
  };
  const std::size_t o_qh = take(q_elems * a->esize_), o_doh = take(q_elems * a->esize_);
  const std::size_t o_kh = take(kv_elems * a->esize_), o_vh = take(kv_elems * a->esize_);
  const std::size_t o_s = take(tile * 4), o_dp = take(tile * 4);
  const std::size_t o_p = take(tile * a->esize_), o_ds = take(tile * a->esize_);
  const std::size_t o_oh = take(q_elems * 4), o_lse = take(lse_elems * 4);
  const std::size_t o_dkh = take(kv_elems * 4), o_dvh = take(kv_elems * 4);
  a->ws_bytes_ = off;

  CHARM_TRY(blas::load());
  CHARM_CUBLAS_TRY(blas::create(&a->blas_));
  CHARM_CUBLAS_TRY(blas::set_stream(a->blas_, stream));
  CHARM_CUDA_TRY(cudaMalloc(a->ws_.out(), a->ws_bytes_));
  char* base = a->ws_.get();
  a->qh_ = base + o_qh;
  a->doh_ = base + o_doh;
  a->kh_ = base + o_kh;
  a->vh_ = base + o_vh;
  a->s_ = reinterpret_cast<float*>(base + o_s);
  a->dp_ = reinterpret_cast<float*>(base + o_dp);
  a->p_ = base + o_p;
  a->ds_ = base + o_ds;
  a->oh_ = reinterpret_cast<float*>(base + o_oh);
  a->lse_ = reinterpret_cast<float*>(base + o_lse);
  a->dkh_ = reinterpret_cast<float*>(base + o_dkh);
  a->dvh_ = reinterpret_cast<float*>(base + o_dvh);
  return a;
}

BlockAttention::~BlockAttention() {
  // Teardown errors cannot be reported from a destructor; the stream's owner
  // synchronises (and checks) before the object goes.
  if (blas_ != nullptr) (void)blas::destroy(blas_);
}

Status BlockAttention::gemm(cublasOperation_t ta, cublasOperation_t tb, std::int64_t m, std::int64_t n, std::int64_t k,
                            float alpha, const void* a, std::int64_t lda, long long stride_a, const void* b,
                            std::int64_t ldb, long long stride_b, float beta, float* c, std::int64_t ldc,
                            long long stride_c, std::int64_t batch) {
  const cudaDataType_t t = blas_type(dtype_);
  CHARM_CUBLAS_TRY(blas::gemm_strided_batched(blas_, ta, tb, int(m), int(n), int(k), &alpha, a, t, int(lda), stride_a,
                                              b, t, int(ldb), stride_b, &beta, c, CUDA_R_32F, int(ldc), stride_c,
                                              int(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return {};
}

// cuBLAS is column-major: a row-major [r, c] matrix is a column-major c x r one
// with leading dimension c. Each product below is written as C^T = op(A) op(B)
// on those views; m, n, k name the column-major shape.

Status BlockAttention::pack_qkv(const void* q, const void* k, const void* v) {
  const auto& d = d_;
  CHARM_TRY(pack_heads(dtype_, q, qh_, d.batch, d.tq, d.heads, d.head_dim, stream_));
  CHARM_TRY(pack_heads(dtype_, k, kh_, d.batch, d.tk, d.kv_heads, d.head_dim, stream_));
  return pack_heads(dtype_, v, vh_, d.batch, d.tk, d.kv_heads, d.head_dim, stream_);
}

Status BlockAttention::scores(const ChunkRows& c) {
  const std::int64_t D = d_.head_dim, tk = d_.tk, rpp = rows_per_pair_;
  const std::int64_t q_off = (c.p0 * rpp + c.r0) * D, kv_off = c.p0 * tk * D;
  // S [nr, tk] = scale * Q [nr, D] K^T: column-major tk x nr = K^T(T) * Q(N), k = D.
  return gemm(CUBLAS_OP_T, CUBLAS_OP_N, tk, c.nr, D, d_.scale, data(kh_, kv_off), D, tk * D, data(qh_, q_off), D,
              rpp * D, 0.0f, s_, tk, c.nr * tk, c.np);
}

Status BlockAttention::fwd(const void* q, const void* k, const void* v, const int* vis, float* o_acc, float* lse_acc) {
  const auto& d = d_;
  const std::int64_t D = d.head_dim, tk = d.tk, rpp = rows_per_pair_;
  CHARM_TRY(pack_qkv(q, k, v));
  for (const auto& c : chunks_) {
    const std::int64_t q_off = (c.p0 * rpp + c.r0) * D, kv_off = c.p0 * tk * D;
    CHARM_TRY(scores(c));
    CHARM_TRY(softmax_rows(dtype_, s_, p_, lse_, vis, c, stream_));
    // O [nr, D] = P [nr, tk] V [tk, D]: column-major D x nr = V(N) * P(N), k = tk.
    CHARM_TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_N, D, c.nr, tk, 1.0f, data(vh_, kv_off), D, tk * D, p_, tk, c.nr * tk, 0.0f,
                   oh_ + q_off, D, rpp * D, c.np));
  }
  return merge_out(oh_, lse_, true, o_acc, lse_acc, d.batch, d.tq, d.heads, D, stream_);
}

Status BlockAttention::bwd(const void* q, const void* dout, const float* lse, const float* delta, const void* k,
                           const void* v, const int* vis, float* dq, float* dk, float* dv) {
  const auto& d = d_;
  const std::int64_t D = d.head_dim, tk = d.tk, rpp = rows_per_pair_;
  float* dqh = oh_;  // the forward's O buffer has dQ's shape
  CHARM_TRY(pack_qkv(q, k, v));
  CHARM_TRY(pack_heads(dtype_, dout, doh_, d.batch, d.tq, d.heads, D, stream_));
  for (const auto& c : chunks_) {
    const std::int64_t q_off = (c.p0 * rpp + c.r0) * D, kv_off = c.p0 * tk * D;
    // S = scale Q K^T as in the forward, and dP = dO V^T.
    CHARM_TRY(scores(c));
    CHARM_TRY(gemm(CUBLAS_OP_T, CUBLAS_OP_N, tk, c.nr, D, 1.0f, data(vh_, kv_off), D, tk * D, data(doh_, q_off), D,
                   rpp * D, 0.0f, dp_, tk, c.nr * tk, c.np));
    CHARM_TRY(softmax_bwd_rows(dtype_, s_, dp_, lse, delta, vis, p_, ds_, c, stream_));
    // dQ [nr, D] = scale dS [nr, tk] K [tk, D]: column-major D x nr = K(N) * dS(N), k = tk.
    CHARM_TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_N, D, c.nr, tk, d.scale, data(kh_, kv_off), D, tk * D, ds_, tk, c.nr * tk,
                   0.0f, dqh + q_off, D, rpp * D, c.np));
    // dK [tk, D] = scale dS^T Q: column-major D x tk = Q(N) * dS(T), k = nr; row slices of one pair accumulate.
    const float beta = c.r0 > 0 ? 1.0f : 0.0f;
    CHARM_TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_T, D, tk, c.nr, d.scale, data(qh_, q_off), D, rpp * D, ds_, tk, c.nr * tk,
                   beta, dkh_ + kv_off, D, tk * D, c.np));
    // dV [tk, D] = P^T dO: column-major D x tk = dO(N) * P(T), k = nr.
    CHARM_TRY(gemm(CUBLAS_OP_N, CUBLAS_OP_T, D, tk, c.nr, 1.0f, data(doh_, q_off), D, rpp * D, p_, tk, c.nr * tk, beta,
                   dvh_ + kv_off, D, tk * D, c.np));
  }
  CHARM_TRY(add_heads_to_tokens(dqh, dq, d.batch, d.tq, d.heads, D, stream_));
  CHARM_TRY(add_heads_to_tokens(dkh_, dk, d.batch, tk, d.kv_heads, D, stream_));
  return add_heads_to_tokens(dvh_, dv, d.batch, tk, d.kv_heads, D, stream_);
}

}  // namespace charm::rt::cuda
