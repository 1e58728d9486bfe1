// Attention block kernels on the GPU (runtime/cuda BlockAttention): time per
// block from CUDA events and TFLOP/s against the card's dense bf16 peak.
// FLOPs are counted as the plan counts them (FlashAttention's convention: 4
// B H D per visible (query, key) pair forward, 2.5x that backward), so a
// causal block, which the GEMMs compute in full, shows about half the rate.
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cuda/block_attention.hpp"
#include "runtime/cuda/cuda_executor.hpp"
#include "runtime/cuda/kernels.hpp"

namespace {

using charm::rt::cuda::BlockAttention;

/// Dense bf16 tensor-core peak (TFLOP/s, no sparsity) of the cards we expect; 0 = unknown.
double bf16_peak_tflops(const std::string& name) {
  struct Entry {
    const char* key;
    double tflops;
  };
  const Entry table[] = {{"H200", 989.4}, {"H100 PCIe", 756.0}, {"H100", 989.4}, {"GH200", 989.4},
                         {"A100", 312.0}, {"L40S", 362.1},      {"L4", 121.0}};
  for (const auto& e : table)
    if (name.find(e.key) != std::string::npos) return e.tflops;
  return 0;
}

struct Dev {
  void* p = nullptr;
  explicit Dev(std::size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) p = nullptr;
  }
  ~Dev() { (void)cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

void block(benchmark::State& st, bool fwd, bool causal) {
  if (!charm::rt::cuda::device_count()) {
    st.SkipWithError("no CUDA device");
    return;
  }
  const std::int64_t T = st.range(0), H = st.range(1), D = st.range(2), B = 1;
  const auto dt = charm::ir::DType::BF16;
  const std::size_t n = std::size_t(B * T * H * D);
  Dev q(n * 2), k(n * 2), v(n * 2), dout(n * 2), stage(n * 4), o(n * 4), dq(n * 4), dk(n * 4), dv(n * 4),
      lse(std::size_t(B * H * T) * 4), delta(std::size_t(B * H * T) * 4), vis(std::size_t(T) * 4);
  cudaStream_t s = nullptr;
  if (!q.p || !k.p || !v.p || !dout.p || !stage.p || !o.p || !dq.p || !dk.p || !dv.p || !lse.p || !delta.p || !vis.p ||
      cudaStreamCreate(&s) != cudaSuccess) {
    st.SkipWithError("cudaMalloc / cudaStreamCreate failed");
    return;
  }
  // Inputs: a smooth pattern in [-1, 1]; lse and delta such that the backward sees probabilities.
  std::vector<float> h(n);
  for (std::size_t i = 0; i < n; ++i) h[i] = float(std::sin(0.37 * double(i % 9973)));
  bool ok = cudaMemcpy(stage.p, h.data(), n * 4, cudaMemcpyHostToDevice) == cudaSuccess;
  for (void* dst : {q.p, k.p, v.p, dout.p})
    ok = ok && bool(charm::rt::cuda::convert_from_f32(dt, static_cast<float*>(stage.p), dst, std::int64_t(n), s));
  std::vector<int> counts(static_cast<std::size_t>(T));
  for (std::int64_t i = 0; i < T; ++i) counts[std::size_t(i)] = causal ? int(i + 1) : int(T);
  ok = ok && cudaMemcpy(vis.p, counts.data(), counts.size() * 4, cudaMemcpyHostToDevice) == cudaSuccess;
  ok = ok && bool(charm::rt::cuda::fill_f32(static_cast<float*>(lse.p), B * H * T, std::log(float(T)), s));
  ok = ok && bool(charm::rt::cuda::fill_f32(static_cast<float*>(delta.p), B * H * T, 0.0f, s));
  ok = ok && bool(charm::rt::cuda::fill_f32(static_cast<float*>(o.p), std::int64_t(n), 0.0f, s));
  auto attn = BlockAttention::create(dt, {B, H, H, D, T, T, float(1.0 / std::sqrt(double(D)))}, s);
  if (!ok || !attn) {
    st.SkipWithError(attn ? "setup failed" : attn.error().message().c_str());
    return;
  }
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  (void)cudaEventCreate(&e0);
  (void)cudaEventCreate(&e1);
  auto once = [&]() -> bool {
    if (fwd) {
      // Re-empty the accumulator so every iteration does the same work (lse -inf: plain copy in the merge).
      if (!charm::rt::cuda::fill_f32(static_cast<float*>(lse.p), B * H * T, -INFINITY, s)) return false;
      return bool(
          (*attn)->fwd(q.p, k.p, v.p, static_cast<int*>(vis.p), static_cast<float*>(o.p), static_cast<float*>(lse.p)));
    }
    return bool((*attn)->bwd(q.p, dout.p, static_cast<float*>(lse.p), static_cast<float*>(delta.p), k.p, v.p,
                             static_cast<int*>(vis.p), static_cast<float*>(dq.p), static_cast<float*>(dk.p),
                             static_cast<float*>(dv.p)));
  };
  if (!once() || cudaStreamSynchronize(s) != cudaSuccess) {  // warm-up (cuBLAS heuristics, module load)
    st.SkipWithError("kernel launch failed");
    return;
  }
  double total_ms = 0;
  for (auto _ : st) {
    (void)cudaEventRecord(e0, s);
    const bool launched = once();
    (void)cudaEventRecord(e1, s);
    if (!launched || cudaEventSynchronize(e1) != cudaSuccess) {
      st.SkipWithError("kernel failed");
      break;
    }
    float ms = 0;
    (void)cudaEventElapsedTime(&ms, e0, e1);
    total_ms += ms;
    st.SetIterationTime(double(ms) * 1e-3);
  }
  const double pairs = causal ? double(T) * double(T + 1) / 2 : double(T) * double(T);
  const double flops = 4.0 * double(B * H * D) * pairs * (fwd ? 1.0 : 2.5);
  const double mean_s = st.iterations() > 0 ? total_ms * 1e-3 / double(st.iterations()) : 0;
  cudaDeviceProp p{};
  (void)cudaGetDeviceProperties(&p, 0);
  const double tflops = mean_s > 0 ? flops / mean_s / 1e12 : 0;
  const double peak = bf16_peak_tflops(p.name);
  st.counters["TFLOPs"] = tflops;
  st.counters["peak_pct"] = peak > 0 ? 100.0 * tflops / peak : 0;
  st.SetLabel(p.name);
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  (void)cudaStreamDestroy(s);
}

void shapes(benchmark::internal::Benchmark* b) {
  // (tokens per shard, heads, head_dim): shards of S = 32k over 8 and 4 ranks.
  b->Args({4096, 32, 128})->Args({8192, 32, 128})->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
}

BENCHMARK_CAPTURE(block, fwd_full, true, false)->Apply(shapes);
BENCHMARK_CAPTURE(block, fwd_causal, true, true)->Apply(shapes);
BENCHMARK_CAPTURE(block, bwd_full, false, false)->Apply(shapes);
BENCHMARK_CAPTURE(block, bwd_causal, false, true)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
