#include "runtime/global_tensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <thread>
#include <tuple>

#include "support/parallel_for.hpp"

namespace charm::rt {
namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// A standard normal from (seed, stream, index) by Box-Muller.
float normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const std::uint64_t h1 = splitmix(splitmix(seed ^ (stream << 56)) ^ index);
  const std::uint64_t h2 = splitmix(h1 ^ 0xD1B54A32D192ED03ull);
  const double u1 = (double(h1 >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
  const double u2 = double(h2 >> 11) * 0x1.0p-53;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

}  // namespace

void round_all(ir::DType t, std::span<float> xs) {
  if (t == ir::DType::FP32) return;
  for (float& x : xs) x = round_to(t, x);
}

float round_to(ir::DType t, float x) {
  if (t == ir::DType::FP32 || !std::isfinite(x)) return x;
  if (t == ir::DType::BF16) {
    auto u = std::bit_cast<std::uint32_t>(x);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return std::bit_cast<float>(u & 0xFFFF0000u);
  }
  // fp16: 11 significant bits; subnormals below 2^-14 keep a fixed 2^-24 step.
  if (x == 0.0f) return x;
  int e = 0;
  std::frexp(x, &e);
  const int step = std::max(e - 11, -24);
  const float r = std::ldexp(std::nearbyint(std::ldexp(x, -step)), step);
  return std::fabs(r) > 65504.0f ? std::copysign(INFINITY, x) : r;
}

GlobalTensors make_inputs(const ir::Workload& w, std::uint64_t seed, int jobs, bool with_dout) {
  GlobalTensors g;
  const auto nq = static_cast<std::size_t>(w.batch * w.seq * w.heads * w.head_dim);
  const auto nkv = static_cast<std::size_t>(w.batch * w.seq * w.kv_heads * w.head_dim);
  // Each element is a function of (seed, tensor, index) alone, so blocks fill on any thread in any order with
  // the same numbers. A block is 64k elements (about 2 ms of Box-Muller): a 32k-token layer has thousands.
  constexpr std::size_t kBlock = std::size_t{1} << 16;
  struct Part {
    std::vector<float>* t;
    std::uint64_t stream;
    std::size_t first;
  };
  std::vector<Part> parts;
  const std::tuple<std::vector<float>*, std::size_t, std::uint64_t> tensors[] = {
      {&g.q, nq, 1}, {&g.k, nkv, 2}, {&g.v, nkv, 3}, {&g.dout, nq, 4}};
  for (const auto& [t, n, stream] : tensors) {
    if (t == &g.dout && !with_dout) continue;
    t->resize(n);
    for (std::size_t first = 0; first < n; first += kBlock) parts.push_back({t, stream, first});
  }
  if (jobs <= 0) jobs = int(std::max(1u, std::thread::hardware_concurrency()));
  parallel_for(parts.size(), jobs, [&](std::size_t p) {
    const Part& part = parts[p];
    std::vector<float>& t = *part.t;
    const std::size_t last = std::min(t.size(), part.first + kBlock);
    for (std::size_t i = part.first; i < last; ++i) t[i] = round_to(w.dtype, normal(seed, part.stream, i));
  });
  return g;
}

void gather_tokens(const ir::Workload& w, std::span<const std::int64_t> positions, std::int64_t heads,
                   std::span<const float> global, std::span<float> shard) {
  const std::int64_t row = heads * w.head_dim, t = static_cast<std::int64_t>(positions.size());
  for (std::int64_t b = 0; b < w.batch; ++b)
    for (std::int64_t i = 0; i < t; ++i)
      std::memcpy(shard.data() + (b * t + i) * row, global.data() + (b * w.seq + positions[std::size_t(i)]) * row,
                  sizeof(float) * std::size_t(row));
}

void scatter_tokens(const ir::Workload& w, std::span<const std::int64_t> positions, std::int64_t heads,
                    std::span<const float> shard, std::span<float> global) {
  const std::int64_t row = heads * w.head_dim, t = static_cast<std::int64_t>(positions.size());
  for (std::int64_t b = 0; b < w.batch; ++b)
    for (std::int64_t i = 0; i < t; ++i)
      std::memcpy(global.data() + (b * w.seq + positions[std::size_t(i)]) * row, shard.data() + (b * t + i) * row,
                  sizeof(float) * std::size_t(row));
}

void gather_lse(const ir::Workload& w, std::span<const std::int64_t> positions, std::span<const float> global,
                std::span<float> shard) {
  const auto t = static_cast<std::int64_t>(positions.size());
  for (std::int64_t bh = 0; bh < w.batch * w.heads; ++bh)
    for (std::int64_t i = 0; i < t; ++i)
      shard[std::size_t(bh * t + i)] = global[std::size_t(bh * w.seq + positions[std::size_t(i)])];
}

void scatter_lse(const ir::Workload& w, std::span<const std::int64_t> positions, std::span<const float> shard,
                 std::span<float> global) {
  const auto t = static_cast<std::int64_t>(positions.size());
  for (std::int64_t bh = 0; bh < w.batch * w.heads; ++bh)
    for (std::int64_t i = 0; i < t; ++i)
      global[std::size_t(bh * w.seq + positions[std::size_t(i)])] = shard[std::size_t(bh * t + i)];
}

}  // namespace charm::rt
