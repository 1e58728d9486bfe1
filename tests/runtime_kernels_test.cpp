// CPU attention kernels against the fp64 reference: masks from global
// positions, blocks merged in any order, rows that see no key, GQA, the
// backward block, dtype rounding and the .npy writer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "runtime/check.hpp"
#include "runtime/cpu_attention.hpp"
#include "runtime/executor.hpp"
#include "runtime/global_tensors.hpp"
#include "runtime/npy.hpp"
#include "runtime/reference.hpp"

namespace charm::rt {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

ir::Workload small(bool causal, std::int64_t heads = 2, std::int64_t kv_heads = 1) {
  ir::Workload w;
  w.batch = 2;
  w.seq = 48;
  w.heads = heads;
  w.kv_heads = kv_heads;
  w.head_dim = 16;
  w.dtype = ir::DType::FP32;
  w.causal = causal;
  return w;
}

AttnShape shape_of(const ir::Workload& w) {
  return {w.batch, w.heads, w.kv_heads, w.head_dim, float(1.0 / std::sqrt(double(w.head_dim))), w.causal};
}

/// Global positions split into `parts` interleaved, ascending chunks (like a zigzag shard).
std::vector<std::vector<std::int64_t>> split(std::int64_t seq, int parts) {
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(parts));
  const std::int64_t c = seq / (2 * parts);
  for (int r = 0; r < parts; ++r) {
    for (std::int64_t t = 0; t < c; ++t) out[std::size_t(r)].push_back(r * c + t);
    for (std::int64_t t = 0; t < c; ++t) out[std::size_t(r)].push_back((2 * parts - 1 - r) * c + t);
  }
  return out;
}

struct Shard {
  std::vector<float> q, k, v, dout, out, lse;
};
Shard shard(const ir::Workload& w, const GlobalTensors& g, const std::vector<std::int64_t>& pos, const Reference* ref) {
  Shard s;
  const auto t = std::int64_t(pos.size());
  s.q.resize(std::size_t(w.batch * t * w.heads * w.head_dim));
  s.dout.resize(s.q.size());
  s.k.resize(std::size_t(w.batch * t * w.kv_heads * w.head_dim));
  s.v.resize(s.k.size());
  gather_tokens(w, pos, w.heads, g.q, s.q);
  gather_tokens(w, pos, w.heads, g.dout, s.dout);
  gather_tokens(w, pos, w.kv_heads, g.k, s.k);
  gather_tokens(w, pos, w.kv_heads, g.v, s.v);
  if (ref != nullptr) {
    std::vector<float> out(ref->out.begin(), ref->out.end()), lse(ref->lse.begin(), ref->lse.end());
    s.out.resize(s.q.size());
    s.lse.resize(std::size_t(w.batch * w.heads * t));
    gather_tokens(w, pos, w.heads, out, s.out);
    gather_lse(w, pos, lse, s.lse);
  }
  return s;
}

class KernelTest : public ::testing::TestWithParam<std::tuple<bool, int>> {};

// Forward: every (q part, kv part) block, merged into an accumulator in a
// shuffled order, equals dense attention. Covers masks from global positions
// (including blocks that are empty or partly visible) and merge order.
TEST_P(KernelTest, ForwardBlocksMergeToReference) {
  const auto [causal, heads_per_kv] = GetParam();
  const auto w = small(causal, 2 * heads_per_kv, 2);
  const auto g = make_inputs(w, 11);
  const auto ref = reference_attention(w, g, false);
  const auto a = shape_of(w);
  const int parts = 3;
  const auto pos = split(w.seq, parts);
  GlobalTensors run;
  run.out.resize(g.q.size());
  run.lse.resize(std::size_t(w.batch * w.heads * w.seq));
  std::mt19937 rng(5);
  for (int x = 0; x < parts; ++x) {
    const auto X = shard(w, g, pos[std::size_t(x)], nullptr);
    const auto t = std::int64_t(pos[std::size_t(x)].size());
    std::vector<float> acc(X.q.size(), 0.0f), acc_lse(std::size_t(w.batch * w.heads * t), kNegInf);
    std::vector<float> part(acc.size()), part_lse(acc_lse.size());
    std::vector<int> order(parts);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (int y : order) {
      const auto Y = shard(w, g, pos[std::size_t(y)], nullptr);
      attention_fwd_block(a, X.q.data(), pos[std::size_t(x)], Y.k.data(), Y.v.data(), pos[std::size_t(y)], part.data(),
                          part_lse.data());
      merge_out(a, t, part.data(), part_lse.data(), acc.data(), acc_lse.data());
    }
    scatter_tokens(w, pos[std::size_t(x)], w.heads, acc, run.out);
    scatter_lse(w, pos[std::size_t(x)], acc_lse, run.lse);
  }
  EXPECT_LE(compare(run.out, ref.out).max_rel, 1e-5);
  EXPECT_LE(compare(run.lse, ref.lse).max_rel, 1e-5);
}

// Backward: dq, dk, dv summed over every block equal the dense gradients.
TEST_P(KernelTest, BackwardBlocksSumToReference) {
  const auto [causal, heads_per_kv] = GetParam();
  const auto w = small(causal, 2 * heads_per_kv, 2);
  const auto g = make_inputs(w, 12);
  const auto ref = reference_attention(w, g, true);
  const auto a = shape_of(w);
  const int parts = 3;
  const auto pos = split(w.seq, parts);
  GlobalTensors run;
  run.dq.assign(g.q.size(), 0.0f);
  run.dk.assign(g.k.size(), 0.0f);
  run.dv.assign(g.v.size(), 0.0f);
  std::vector<Shard> sh;
  for (int x = 0; x < parts; ++x) sh.push_back(shard(w, g, pos[std::size_t(x)], &ref));
  std::vector<std::vector<float>> dk(parts, std::vector<float>(sh[0].k.size())), dv = dk;
  for (int x = 0; x < parts; ++x) {
    const auto t = std::int64_t(pos[std::size_t(x)].size());
    std::vector<float> delta(std::size_t(w.batch * w.heads * t)), dq(sh[std::size_t(x)].q.size(), 0.0f);
    bundle_delta(a, t, sh[std::size_t(x)].dout.data(), sh[std::size_t(x)].out.data(), delta.data());
    for (int y = 0; y < parts; ++y)
      attention_bwd_block(a, sh[std::size_t(x)].q.data(), sh[std::size_t(x)].dout.data(), sh[std::size_t(x)].lse.data(),
                          delta.data(), pos[std::size_t(x)], sh[std::size_t(y)].k.data(), sh[std::size_t(y)].v.data(),
                          pos[std::size_t(y)], dq.data(), dk[std::size_t(y)].data(), dv[std::size_t(y)].data());
    scatter_tokens(w, pos[std::size_t(x)], w.heads, dq, run.dq);
  }
  for (int y = 0; y < parts; ++y) {
    scatter_tokens(w, pos[std::size_t(y)], w.kv_heads, dk[std::size_t(y)], run.dk);
    scatter_tokens(w, pos[std::size_t(y)], w.kv_heads, dv[std::size_t(y)], run.dv);
  }
  EXPECT_LE(compare(run.dq, ref.dq).max_rel, 1e-5);
  EXPECT_LE(compare(run.dk, ref.dk).max_rel, 1e-5);
  EXPECT_LE(compare(run.dv, ref.dv).max_rel, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Masks, KernelTest, ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 4)),
                         [](const auto& p) {
                           return std::string(std::get<0>(p.param) ? "causal" : "full") + "_group" +
                                  std::to_string(std::get<1>(p.param));
                         });

// Queries that precede every key under a causal mask: O = 0, LSE = -inf, no
// NaN anywhere, and merging such a partial (either way round) is harmless.
TEST(Kernel, RowsThatSeeNoKeyStayFinite) {
  auto w = small(true, 2, 2);
  const auto g = make_inputs(w, 3);
  const auto a = shape_of(w);
  std::vector<std::int64_t> qpos(8), kpos(8);
  std::iota(qpos.begin(), qpos.end(), 0);
  std::iota(kpos.begin(), kpos.end(), 8);
  const auto Q = shard(w, g, qpos, nullptr), K = shard(w, g, kpos, nullptr);
  std::vector<float> out(Q.q.size(), 1.0f), lse(std::size_t(w.batch * w.heads * 8), 0.0f);
  attention_fwd_block(a, Q.q.data(), qpos, K.k.data(), K.v.data(), kpos, out.data(), lse.data());
  for (float x : out) EXPECT_EQ(x, 0.0f);
  for (float l : lse) EXPECT_EQ(l, kNegInf);
  // empty into empty
  std::vector<float> acc(out.size(), 0.0f), acc_lse(lse.size(), kNegInf);
  merge_out(a, 8, out.data(), lse.data(), acc.data(), acc_lse.data());
  for (float x : acc) EXPECT_FALSE(std::isnan(x));
  for (float l : acc_lse) EXPECT_EQ(l, kNegInf);
  // real into empty, then empty into real: the real one survives unchanged
  std::vector<float> real(out.size()), real_lse(lse.size());
  attention_fwd_block(a, Q.q.data(), qpos, Q.k.data(), Q.v.data(), qpos, real.data(), real_lse.data());
  merge_out(a, 8, real.data(), real_lse.data(), acc.data(), acc_lse.data());
  EXPECT_EQ(acc, real);
  EXPECT_EQ(acc_lse, real_lse);
  merge_out(a, 8, out.data(), lse.data(), acc.data(), acc_lse.data());
  EXPECT_EQ(acc, real);
  EXPECT_EQ(acc_lse, real_lse);
  // backward with lse = -inf rows adds nothing and makes no NaN
  std::vector<float> delta(lse.size(), 0.0f), dq(Q.q.size(), 0.0f), dk(K.k.size(), 0.0f), dv(K.v.size(), 0.0f);
  attention_bwd_block(a, Q.q.data(), Q.dout.data(), lse.data(), delta.data(), qpos, K.k.data(), K.v.data(), kpos,
                      dq.data(), dk.data(), dv.data());
  for (float x : dq) EXPECT_EQ(x, 0.0f);
  for (float x : dk) EXPECT_EQ(x, 0.0f);
}

// Merging is associative and commutative up to rounding: ((a b) c) == (a (c b)).
TEST(Kernel, MergeIsAssociative) {
  auto w = small(false, 2, 2);
  w.batch = 1;
  const auto a = shape_of(w);
  const std::int64_t t = 5, n = t * w.heads * w.head_dim, nl = t * w.heads;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0, 3);
  std::vector<float> o[3], l[3];
  for (int i = 0; i < 3; ++i) {
    o[i].resize(std::size_t(n));
    l[i].resize(std::size_t(nl));
    for (auto& x : o[i]) x = nd(rng);
    for (auto& x : l[i]) x = nd(rng) * 10;
  }
  l[1][0] = kNegInf;  // one empty row in one partial
  auto left_o = o[0], left_l = l[0];
  merge_out(a, t, o[1].data(), l[1].data(), left_o.data(), left_l.data());
  merge_out(a, t, o[2].data(), l[2].data(), left_o.data(), left_l.data());
  auto right_o = o[2], right_l = l[2];
  merge_out(a, t, o[1].data(), l[1].data(), right_o.data(), right_l.data());
  merge_out(a, t, right_o.data(), right_l.data(), o[0].data(), l[0].data());
  for (std::int64_t i = 0; i < n; ++i) EXPECT_NEAR(left_o[std::size_t(i)], o[0][std::size_t(i)], 1e-5f);
  for (std::int64_t i = 0; i < nl; ++i) EXPECT_NEAR(left_l[std::size_t(i)], l[0][std::size_t(i)], 1e-5f);
}

TEST(Inputs, SameSeedSameNumbersRoundedToDtype) {
  auto w = small(false);
  const auto a = make_inputs(w, 1), b = make_inputs(w, 1), c = make_inputs(w, 2);
  EXPECT_EQ(a.q, b.q);
  EXPECT_NE(a.q, c.q);
  w.dtype = ir::DType::BF16;
  for (float x : make_inputs(w, 1).k) EXPECT_EQ(std::bit_cast<std::uint32_t>(x) & 0xFFFFu, 0u);
  EXPECT_EQ(round_to(ir::DType::BF16, 1.00390625f), 1.0f);         // tie to even
  EXPECT_EQ(round_to(ir::DType::FP16, 1.0f + 1.0f / 4096), 1.0f);  // below half an fp16 ulp
  EXPECT_EQ(round_to(ir::DType::FP16, 1.0f + 1.0f / 1024), 1.0f + 1.0f / 1024);
}

/// The generator's number at (seed, tensor, index), written out here on its own: Box-Muller on two splitmix64 hashes.
float generated(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const auto mix = [](std::uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  };
  const std::uint64_t h1 = mix(mix(seed ^ (stream << 56)) ^ index), h2 = mix(h1 ^ 0xD1B54A32D192ED03ull);
  const double u1 = (double(h1 >> 11) + 0.5) * 0x1.0p-53, u2 = double(h2 >> 11) * 0x1.0p-53;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.14159265358979323846 * u2));
}

/// GQA inputs in fp32 (no rounding): q 512,000 elements, 7.8 blocks of 65,536; k and v a quarter of that.
ir::Workload inputs_workload() {
  ir::Workload w;
  w.seq = 1000;
  w.heads = 8;
  w.kv_heads = 2;
  w.head_dim = 64;
  w.dtype = ir::DType::FP32;
  return w;
}

TEST(Inputs, TheSameNumbersOnEveryJobCountAcrossItsBlocks) {
  const ir::Workload w = inputs_workload();
  const auto one = make_inputs(w, 9, 1), three = make_inputs(w, 9, 3);
  EXPECT_EQ(one.q, three.q);
  EXPECT_EQ(one.k, three.k);
  EXPECT_EQ(one.v, three.v);
  EXPECT_EQ(one.dout, three.dout);
  ASSERT_EQ(one.q.size(), 512000u);
  ASSERT_EQ(one.v.size(), 128000u);
  // Each element is the generator's at its own index, on both sides of a block's edge and at the end.
  for (const std::size_t i : {std::size_t{0}, std::size_t{65535}, std::size_t{65536}, std::size_t{511999}})
    EXPECT_EQ(three.q[i], generated(9, 1, i)) << i;
  EXPECT_EQ(three.k[127999], generated(9, 2, 127999));
  EXPECT_EQ(three.v[65536], generated(9, 3, 65536));
  EXPECT_EQ(three.dout[300000], generated(9, 4, 300000));
}

TEST(Inputs, AForwardRunDrawsNoOutputGradient) {
  ir::Workload w = inputs_workload();
  const auto all = make_inputs(w, 9);
  const auto fwd = plan_inputs(w, 9);  // w.pass: fwd
  EXPECT_TRUE(fwd.dout.empty());
  EXPECT_EQ(fwd.q, all.q);
  EXPECT_EQ(fwd.k, all.k);
  EXPECT_EQ(fwd.v, all.v);
  w.pass = ir::PassKind::Both;
  EXPECT_EQ(plan_inputs(w, 9).dout, all.dout);  // a backward pass reads it: the same numbers as ever
}

TEST(Npy, HeaderIsAlignedAndDescribesTheArray) {
  const std::vector<float> data{1, 2, 3, 4, 5, 6};
  const auto bytes = npy_bytes(data, {2, 3});
  ASSERT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const auto hlen = std::size_t(std::uint8_t(bytes[8])) | (std::size_t(std::uint8_t(bytes[9])) << 8);
  EXPECT_EQ((10 + hlen) % 64, 0u);
  const auto header = bytes.substr(10, hlen);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(header.find("'shape': (2, 3)"), std::string::npos);
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + hlen + data.size() * 4);
  EXPECT_NE(npy_bytes(data, {6}).find("(6,)"), std::string::npos);
}

}  // namespace
}  // namespace charm::rt
