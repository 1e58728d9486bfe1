// GPU attention block kernels against the CPU kernels (runtime/cpu_attention),
// which the fp64 reference already vouches for: forward (out, lse) and
// backward (dq, dk, dv) of single blocks, every mask piece (contiguous and
// zigzag pairs, from global positions), GQA, bf16/fp16/fp32, and a tile
// budget small enough to force row-sliced chunks. Skips without a device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "runtime/cpu_attention.hpp"
#include "runtime/cuda/block_attention.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/kernels.hpp"
#include "runtime/global_tensors.hpp"
#include "runtime/reference.hpp"
#include "runtime/shard_shape.hpp"

namespace charm::rt::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                                                                             \
  do {                                                                                                                 \
    if (auto n = device_count(); !n) GTEST_SKIP() << n.error().message();                                              \
  } while (0)

#define ASSERT_OK(expr)                                                                                                \
  do {                                                                                                                 \
    auto st_ = (expr);                                                                                                 \
    ASSERT_TRUE(bool(st_)) << st_.error().message();                                                                   \
  } while (0)

/// Device memory freed at scope exit.
struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<std::size_t>(bytes, 4)), cudaSuccess); }
  ~Dev() { (void)cudaFree(p); }
  Dev(Dev&& o) noexcept : p(o.p) { o.p = nullptr; }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev& operator=(Dev&&) = delete;
  float* f() const { return static_cast<float*>(p); }
};

Dev upload_f32(const std::vector<float>& h) {
  Dev d(h.size() * 4);
  EXPECT_EQ(cudaMemcpy(d.p, h.data(), h.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
/// fp32 host data -> device, converted to dtype.
Dev upload_as(ir::DType t, const std::vector<float>& h) {
  Dev tmp = upload_f32(h);
  Dev d(h.size() * ir::dtype_size(t));
  EXPECT_TRUE(bool(convert_from_f32(t, tmp.f(), d.p, std::int64_t(h.size()), nullptr)));
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d;
}
std::vector<float> download(const Dev& d, std::size_t n) {
  std::vector<float> h(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), d.p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}
/// max |a - b| / max |b| (the check's relative error); -inf entries must match.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (std::isinf(b[i]) || std::isinf(a[i])) {
      if (a[i] != b[i]) return INFINITY;
      continue;
    }
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

struct Case {
  ir::DType dtype = ir::DType::BF16;
  bool causal = true;
  ir::Layout layout = ir::Layout::Contiguous;
  int q_rank = 1, kv_rank = 0;
  std::int64_t heads = 4, kv_heads = 4;
  std::size_t tile_budget = BlockAttention::kDefaultTileBudget;
};

std::string name_of(const testing::TestParamInfo<Case>& i) {
  const auto& c = i.param;
  std::string s = std::string(ir::to_string(c.dtype)) + (c.causal ? "_causal_" : "_full_") +
                  std::string(ir::to_string(c.layout)) + "_q" + std::to_string(c.q_rank) + "kv" +
                  std::to_string(c.kv_rank) + "_h" + std::to_string(c.heads) + "x" + std::to_string(c.kv_heads);
  if (c.tile_budget < BlockAttention::kDefaultTileBudget) s += "_sliced";
  for (auto& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

class BlockKernels : public testing::TestWithParam<Case> {};

TEST_P(BlockKernels, MatchCpuForwardAndBackward) {
  SKIP_WITHOUT_GPU();
  const Case c = GetParam();
  ir::Workload w;
  w.batch = 2;
  w.seq = 512;
  w.heads = c.heads;
  w.kv_heads = c.kv_heads;
  w.head_dim = 64;
  w.dtype = c.dtype;
  w.causal = c.causal;
  w.layout = c.layout;
  const int n = 4;
  const auto ss = ShardShape::of(w, n);
  const auto g = make_inputs(w, 11);  // values already rounded to the dtype
  const auto qp = token_positions(w, c.q_rank, n), kp = token_positions(w, c.kv_rank, n);
  auto shard = [&](const std::vector<float>& t, const std::vector<std::int64_t>& pos, std::int64_t h) {
    std::vector<float> s(std::size_t(w.batch * ss.tokens * h * w.head_dim));
    gather_tokens(w, pos, h, t, s);
    return s;
  };
  const auto q = shard(g.q, qp, w.heads), dout = shard(g.dout, qp, w.heads);
  const auto k = shard(g.k, kp, w.kv_heads), v = shard(g.v, kp, w.kv_heads);
  const AttnShape a{w.batch, w.heads, w.kv_heads, w.head_dim, float(1.0 / std::sqrt(double(w.head_dim))), w.causal};

  // CPU: the block's forward, then its backward from that forward's lse and D.
  std::vector<float> o(q.size()), lse(std::size_t(ss.lse_elems())), delta(lse.size());
  attention_fwd_block(a, q.data(), qp, k.data(), v.data(), kp, o.data(), lse.data());
  bundle_delta(a, ss.tokens, dout.data(), o.data(), delta.data());
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  attention_bwd_block(a, q.data(), dout.data(), lse.data(), delta.data(), qp, k.data(), v.data(), kp, dq.data(),
                      dk.data(), dv.data());

  // GPU.
  std::vector<int> vis(qp.size());
  for (std::size_t i = 0; i < qp.size(); ++i)
    vis[i] = c.causal ? int(std::upper_bound(kp.begin(), kp.end(), qp[i]) - kp.begin()) : int(kp.size());
  Dev vis_d(vis.size() * sizeof(int));
  ASSERT_EQ(cudaMemcpy(vis_d.p, vis.data(), vis.size() * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  Dev qd = upload_as(c.dtype, q), dod = upload_as(c.dtype, dout), kd = upload_as(c.dtype, k),
      vd = upload_as(c.dtype, v);
  Dev o_acc = upload_f32(std::vector<float>(q.size(), 0.0f));
  Dev lse_acc = upload_f32(std::vector<float>(lse.size(), -INFINITY));
  auto attn = BlockAttention::create(c.dtype, {w.batch, w.heads, w.kv_heads, w.head_dim, ss.tokens, ss.tokens, a.scale},
                                     nullptr, c.tile_budget);
  ASSERT_TRUE(bool(attn)) << attn.error().message();
  if (c.tile_budget < BlockAttention::kDefaultTileBudget) {
    EXPECT_GT((*attn)->chunks(), std::size_t(w.batch * w.kv_heads));
  }
  ASSERT_OK((*attn)->fwd(qd.p, kd.p, vd.p, static_cast<int*>(vis_d.p), o_acc.f(), lse_acc.f()));
  const auto o_gpu = download(o_acc, o.size()), lse_gpu = download(lse_acc, lse.size());
  const double tol = c.dtype == ir::DType::FP32 ? 1e-5 : 1e-2;
  EXPECT_LE(rel_err(o_gpu, o), tol);
  EXPECT_LE(rel_err(lse_gpu, lse), tol);

  // Backward from the CPU's lse and delta, so that only the backward kernels differ.
  Dev lse_d = upload_f32(lse), delta_d = upload_f32(delta);
  Dev dq_d = upload_f32(std::vector<float>(dq.size(), 0.0f)), dk_d = upload_f32(std::vector<float>(dk.size(), 0.0f)),
      dv_d = upload_f32(std::vector<float>(dv.size(), 0.0f));
  ASSERT_OK((*attn)->bwd(qd.p, dod.p, lse_d.f(), delta_d.f(), kd.p, vd.p, static_cast<int*>(vis_d.p), dq_d.f(),
                         dk_d.f(), dv_d.f()));
  EXPECT_LE(rel_err(download(dq_d, dq.size()), dq), tol);
  EXPECT_LE(rel_err(download(dk_d, dk.size()), dk), tol);
  EXPECT_LE(rel_err(download(dv_d, dv.size()), dv), tol);
}

INSTANTIATE_TEST_SUITE_P(Pieces, BlockKernels,
                         testing::Values(
                             // Contiguous: full (q after kv), causal diagonal, empty (q before kv), non-causal.
                             Case{ir::DType::BF16, true, ir::Layout::Contiguous, 1, 0},
                             Case{ir::DType::BF16, true, ir::Layout::Contiguous, 2, 2},
                             Case{ir::DType::BF16, true, ir::Layout::Contiguous, 0, 3},
                             Case{ir::DType::BF16, false, ir::Layout::Contiguous, 0, 3},
                             // Zigzag: diagonal, kv head, q tail.
                             Case{ir::DType::BF16, true, ir::Layout::Zigzag, 1, 1},
                             Case{ir::DType::BF16, true, ir::Layout::Zigzag, 2, 1},
                             Case{ir::DType::BF16, true, ir::Layout::Zigzag, 1, 2},
                             // GQA, fp16, fp32 (no TF32: held to the fp32 tolerance).
                             Case{ir::DType::BF16, true, ir::Layout::Zigzag, 2, 2, 8, 2},
                             Case{ir::DType::FP16, true, ir::Layout::Zigzag, 3, 0, 8, 2},
                             Case{ir::DType::FP32, true, ir::Layout::Zigzag, 3, 3, 4, 4},
                             // Row slices: 40 KiB of bf16 tiles hold 26 rows of 128 keys, 20 KiB of fp32 ones 10 (a
                             // pair has 512 / 1024 rows).
                             Case{ir::DType::BF16, true, ir::Layout::Zigzag, 2, 2, 8, 2, std::size_t(40) << 10},
                             Case{ir::DType::FP32, false, ir::Layout::Contiguous, 1, 0, 8, 1, std::size_t(20) << 10}),
                         name_of);

TEST(MergeKernel, MatchesCpuMergeWithEmptyRows) {
  SKIP_WITHOUT_GPU();
  const AttnShape a{2, 3, 3, 5, 1.0f, false};
  const std::int64_t T = 7, n = a.batch * T * a.heads * a.head_dim, nl = a.batch * a.heads * T;
  std::vector<float> o1(static_cast<std::size_t>(n)), o2(static_cast<std::size_t>(n)), l1(static_cast<std::size_t>(nl)),
      l2(static_cast<std::size_t>(nl));
  for (std::int64_t i = 0; i < n; ++i) {
    o1[std::size_t(i)] = std::sin(float(i));
    o2[std::size_t(i)] = std::cos(float(i));
  }
  for (std::int64_t i = 0; i < nl; ++i) {
    l1[std::size_t(i)] = i % 5 == 0 ? -INFINITY : float(i % 3);
    l2[std::size_t(i)] = i % 7 == 0 ? -INFINITY : float(i % 4) - 1.0f;
  }
  Dev o1d = upload_f32(o1), o2d = upload_f32(o2), l1d = upload_f32(l1), l2d = upload_f32(l2);
  merge_out(a, T, o2.data(), l2.data(), o1.data(), l1.data());
  ASSERT_OK(merge_out(o2d.f(), l2d.f(), false, o1d.f(), l1d.f(), a.batch, T, a.heads, a.head_dim, nullptr));
  EXPECT_LE(rel_err(download(o1d, o1.size()), o1), 1e-6);
  EXPECT_LE(rel_err(download(l1d, l1.size()), l1), 1e-6);
}

// A backward-only run's forward results from the device (dense_forward) are the fp64
// reference's, to the dtype's rounding: causal and full, GQA; a window is refused.
TEST(DenseForward, MatchesTheReference) {
  SKIP_WITHOUT_GPU();
  for (const bool causal : {true, false}) {
    ir::Workload w;
    w.batch = 2;
    w.seq = 384;
    w.heads = 4;
    w.kv_heads = 2;
    w.head_dim = 64;
    w.dtype = ir::DType::BF16;
    w.causal = causal;
    w.pass = ir::PassKind::Bwd;
    auto g = make_inputs(w, 5);
    ASSERT_OK(dense_forward(w, g, 0));
    const Reference ref = reference_attention(w, g, false);
    EXPECT_LE(rel_err(g.out, std::vector<float>(ref.out.begin(), ref.out.end())), 1e-2) << "causal " << causal;
    EXPECT_LE(rel_err(g.lse, std::vector<float>(ref.lse.begin(), ref.lse.end())), 1e-3) << "causal " << causal;
    const auto in = device_plan_inputs(w, 5, 0);
    ASSERT_TRUE(bool(in)) << in.error().message();
    EXPECT_EQ(in->out, g.out);
  }
  ir::Workload window;
  window.seq = 64;
  window.heads = window.kv_heads = 1;
  window.causal = true;
  window.window = 8;
  auto g = make_inputs(window, 1);
  EXPECT_FALSE(bool(dense_forward(window, g, 0)));
}

}  // namespace
}  // namespace charm::rt::cuda
