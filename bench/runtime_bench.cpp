// CPU attention block kernels (runtime/cpu_attention): forward and backward
// for one (q shard, kv shard) block, full and causal, and the merge; and the inputs' generator.
// Reports FLOP/s with FlashAttention's count (4*B*H*D per visible pair
// forward, 2.5x that backward).
#include <benchmark/benchmark.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "runtime/cpu_attention.hpp"
#include "runtime/executor.hpp"
#include "runtime/global_tensors.hpp"

namespace {

using charm::rt::AttnShape;

struct Block {
  AttnShape a;
  std::int64_t t;
  std::vector<std::int64_t> pos;
  std::vector<float> q, k, v, dout, out, lse, delta, dq, dk, dv;
  double pairs = 0;
};

Block make(std::int64_t tokens, std::int64_t heads, std::int64_t kv_heads, std::int64_t dim, bool causal) {
  Block b;
  b.a = AttnShape{1, heads, kv_heads, dim, float(1.0 / std::sqrt(double(dim))), causal};
  b.t = tokens;
  b.pos.resize(std::size_t(tokens));
  std::iota(b.pos.begin(), b.pos.end(), 0);
  charm::ir::Workload w;
  w.batch = 1;
  w.seq = tokens;
  w.heads = heads;
  w.kv_heads = kv_heads;
  w.head_dim = dim;
  w.dtype = charm::ir::DType::FP32;
  auto g = charm::rt::make_inputs(w, 1);
  b.q = g.q;
  b.k = g.k;
  b.v = g.v;
  b.dout = g.dout;
  b.out.resize(b.q.size());
  b.lse.resize(std::size_t(heads * tokens));
  b.delta.resize(b.lse.size());
  b.dq.assign(b.q.size(), 0);
  b.dk.assign(b.k.size(), 0);
  b.dv.assign(b.v.size(), 0);
  b.pairs = causal ? double(tokens) * double(tokens + 1) / 2 : double(tokens) * double(tokens);
  charm::rt::attention_fwd_block(b.a, b.q.data(), b.pos, b.k.data(), b.v.data(), b.pos, b.out.data(), b.lse.data());
  charm::rt::bundle_delta(b.a, tokens, b.dout.data(), b.out.data(), b.delta.data());
  return b;
}

void BM_FwdBlock(benchmark::State& st) {
  auto b = make(st.range(0), 8, st.range(1), 128, st.range(2) != 0);
  for (auto _ : st) {
    charm::rt::attention_fwd_block(b.a, b.q.data(), b.pos, b.k.data(), b.v.data(), b.pos, b.out.data(), b.lse.data());
    benchmark::DoNotOptimize(b.out.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(4.0 * 8 * 128 * b.pairs, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_BwdBlock(benchmark::State& st) {
  auto b = make(st.range(0), 8, st.range(1), 128, st.range(2) != 0);
  for (auto _ : st) {
    charm::rt::attention_bwd_block(b.a, b.q.data(), b.dout.data(), b.lse.data(), b.delta.data(), b.pos, b.k.data(),
                                   b.v.data(), b.pos, b.dq.data(), b.dk.data(), b.dv.data());
    benchmark::DoNotOptimize(b.dq.data());
  }
  st.counters["FLOP/s"] = benchmark::Counter(10.0 * 8 * 128 * b.pairs, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Merge(benchmark::State& st) {
  auto b = make(st.range(0), 8, 8, 128, false);
  auto acc = b.out, acc_lse = b.lse;
  for (auto _ : st) {
    charm::rt::merge_out(b.a, b.t, b.out.data(), b.lse.data(), acc.data(), acc_lse.data());
    benchmark::DoNotOptimize(acc.data());
  }
  st.SetBytesProcessed(std::int64_t(st.iterations()) * std::int64_t(3 * (b.out.size() + b.lse.size()) * sizeof(float)));
}

/// The inputs benchmarks' layer: S = 4k, H = 32, D = 128.
charm::ir::Workload inputs_workload() {
  charm::ir::Workload w;
  w.seq = 4096;
  w.heads = w.kv_heads = 32;
  w.head_dim = 128;
  return w;
}

/// A run's inputs (q, k, v, dout) at S = 4k, H = 32, D = 128 (67M numbers) on `jobs` threads: the generator
/// a `charm run` of a long sequence waits for before its first kernel.
void BM_MakeInputs(benchmark::State& st) {
  const charm::ir::Workload w = inputs_workload();
  for (auto _ : st) {
    auto g = charm::rt::make_inputs(w, 1, int(st.range(0)));
    benchmark::DoNotOptimize(g.q.data());
  }
  st.SetItemsProcessed(std::int64_t(st.iterations()) * 4 * w.seq * w.heads * w.head_dim);
}

/// The same run's inputs as a forward pass takes them (plan_inputs: no output gradient), on every core.
void BM_PlanInputsFwd(benchmark::State& st) {
  const charm::ir::Workload w = inputs_workload();
  for (auto _ : st) {
    auto g = charm::rt::plan_inputs(w, 1);
    benchmark::DoNotOptimize(g.q.data());
  }
  st.SetItemsProcessed(std::int64_t(st.iterations()) * 3 * w.seq * w.heads * w.head_dim);
}

// Args: tokens per shard, kv heads (8 = MHA, 2 = GQA), causal.
BENCHMARK(BM_FwdBlock)
    ->Args({256, 8, 0})
    ->Args({512, 8, 0})
    ->Args({512, 8, 1})
    ->Args({512, 2, 0})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BwdBlock)
    ->Args({256, 8, 0})
    ->Args({512, 8, 0})
    ->Args({512, 8, 1})
    ->Args({512, 2, 0})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Merge)->Arg(512)->Arg(4096)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MakeInputs)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlanInputsFwd)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
