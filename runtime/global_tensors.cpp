#include "runtime/global_tensors.hpp"

#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>

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

void fill(std::vector<float>& t, std::size_t n, const ir::Workload& w, std::uint64_t seed, std::uint64_t stream) {
  t.resize(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = round_to(w.dtype, normal(seed, stream, i));
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

GlobalTensors make_inputs(const ir::Workload& w, std::uint64_t seed) {
  GlobalTensors g;
  const auto nq = static_cast<std::size_t>(w.batch * w.seq * w.heads * w.head_dim);
  const auto nkv = static_cast<std::size_t>(w.batch * w.seq * w.kv_heads * w.head_dim);
  fill(g.q, nq, w, seed, 1);
  fill(g.k, nkv, w, seed, 2);
  fill(g.v, nkv, w, seed, 3);
  fill(g.dout, nq, w, seed, 4);
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
