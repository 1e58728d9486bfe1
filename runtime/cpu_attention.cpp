#include "runtime/cpu_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <vector>

// Loops are written as axpy over the innermost contiguous index so that the
// compiler vectorises them without fast-math, and query rows are processed in
// tiles of kTile so that each loaded key/value row is used kTile times.

namespace charm::rt {
namespace {

constexpr int kTile = 4;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Per-thread scratch, grown on demand (kernels run on many worker threads).
struct Scratch {
  std::vector<float> kt, kp, vp, vt, s, dp, qt, dot, ot, dqt, dkl, dvl;
  std::vector<std::int64_t> vis, first;  // per row: one past its last visible key, its first
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}
void grow(std::vector<float>& v, std::int64_t n) {
  if (static_cast<std::int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
}
/// Grows each of `block` to a block of keys (dim x tk), each of `scores` to a tile of scores
/// (kTile x tk) and each of `tile` to a query tile (kTile x dim).
void grow_all(std::initializer_list<std::vector<float>*> block, std::initializer_list<std::vector<float>*> scores,
              std::initializer_list<std::vector<float>*> tile, std::int64_t dim, std::int64_t tk) {
  for (auto* v : block) grow(*v, dim * tk);
  for (auto* v : scores) grow(*v, kTile * tk);
  for (auto* v : tile) grow(*v, kTile * dim);
}
/// How far into the key block the rows [i0, i0 + rows) of a query tile see: the longest visible prefix.
std::int64_t tile_reach(const Scratch& sc, std::int64_t i0, std::int64_t rows) {
  std::int64_t reach = 0;
  for (std::int64_t r = 0; r < rows; ++r) reach = std::max(reach, sc.vis[std::size_t(i0 + r)]);
  return reach;
}

/// The keys each query row sees, [first, vis) of the block (positions ascending): a prefix, unless
/// documents or a window start it later. A row that sees none has first == vis.
void visible_counts(const AttnShape& a, Positions qpos, Positions kpos, std::vector<std::int64_t>& vis,
                    std::vector<std::int64_t>& first) {
  vis.resize(qpos.size());
  first.assign(qpos.size(), 0);
  const auto tk = static_cast<std::int64_t>(kpos.size());
  for (std::size_t i = 0; i < qpos.size(); ++i) {
    vis[i] = a.causal ? std::upper_bound(kpos.begin(), kpos.end(), qpos[i]) - kpos.begin() : tk;
    if (a.positions != nullptr) {
      const std::int64_t from = a.positions->first_visible(qpos[i]);
      first[i] = std::min<std::int64_t>(vis[i], std::lower_bound(kpos.begin(), kpos.end(), from) - kpos.begin());
    }
  }
}

/// s[r][j] = sum_d q[r][d] * kt[d][j] for the kTile rows of qt, j < n.
void scores_tile(const float* __restrict qt, const float* __restrict kt, std::int64_t tk, std::int64_t n,
                 std::int64_t dim, float* __restrict s) {
  float* __restrict s0 = s;
  float* __restrict s1 = s + tk;
  float* __restrict s2 = s + 2 * tk;
  float* __restrict s3 = s + 3 * tk;
  std::fill(s, s + kTile * tk, 0.0f);
  for (std::int64_t d = 0; d < dim; ++d) {
    const float a0 = qt[d], a1 = qt[dim + d], a2 = qt[2 * dim + d], a3 = qt[3 * dim + d];
    const float* __restrict kr = kt + d * tk;
    for (std::int64_t j = 0; j < n; ++j) {
      const float kv = kr[j];
      s0[j] += a0 * kv;
      s1[j] += a1 * kv;
      s2[j] += a2 * kv;
      s3[j] += a3 * kv;
    }
  }
}

/// Copies kTile rows (b, i0.., h) of a [B, T, H, D] tensor into a dense [kTile, D] tile (zero padded).
void load_rows(const float* x, std::int64_t b, std::int64_t i0, std::int64_t rows, std::int64_t t, std::int64_t heads,
               std::int64_t h, std::int64_t dim, float* tile) {
  std::fill(tile, tile + kTile * dim, 0.0f);
  for (std::int64_t r = 0; r < rows; ++r)
    std::memcpy(tile + r * dim, x + ((b * t + i0 + r) * heads + h) * dim, sizeof(float) * std::size_t(dim));
}

/// Packs kv head hk of batch b: rows [T, D] into `rows_out` and/or transposed [D, T] into `cols_out`.
void pack_kv(const float* x, std::int64_t b, std::int64_t t, std::int64_t kv_heads, std::int64_t hk, std::int64_t dim,
             float* rows_out, float* cols_out) {
  for (std::int64_t j = 0; j < t; ++j) {
    const float* src = x + ((b * t + j) * kv_heads + hk) * dim;
    if (rows_out != nullptr) std::memcpy(rows_out + j * dim, src, sizeof(float) * std::size_t(dim));
    if (cols_out != nullptr)
      for (std::int64_t d = 0; d < dim; ++d) cols_out[d * t + j] = src[d];
  }
}

/// One tile of the backward pass: s := P = exp(S * scale - lse), dp := dS = P * (dP - delta) for
/// its rows (lse, delta: the first row's), zero past each row's visible keys up to nmax.
void probabilities_and_ds(const AttnShape& a, Scratch& sc, const float* lse, const float* delta, std::int64_t i0,
                          std::int64_t rows, std::int64_t tk, std::int64_t nmax) {
  for (std::int64_t r = 0; r < kTile; ++r) {
    float* s = sc.s.data() + r * tk;
    float* dp = sc.dp.data() + r * tk;
    std::int64_t n = 0, j0 = 0;
    float l = kNegInf, dl = 0;
    if (r < rows) {
      l = lse[r];
      dl = delta[r];
      n = l == kNegInf ? 0 : sc.vis[std::size_t(i0 + r)];
      j0 = std::min(n, sc.first[std::size_t(i0 + r)]);
    }
    for (std::int64_t j = 0; j < std::min(j0, nmax); ++j) s[j] = dp[j] = 0.0f;
    for (std::int64_t j = j0; j < n; ++j) {
      const float p = std::exp(s[j] * a.scale - l);
      s[j] = p;
      dp[j] = p * (dp[j] - dl);
    }
    for (std::int64_t j = n; j < nmax; ++j) s[j] = dp[j] = 0.0f;
  }
}

/// One tile's gradients, its kTile (= 4) rows at once: dqt = dS K, and dkl += dS^T Q, dvl += P^T dO.
void tile_gradients(Scratch& sc, std::int64_t tk, std::int64_t nmax, std::int64_t D) {
  float* __restrict g0 = sc.dqt.data();
  float* __restrict g1 = g0 + D;
  float* __restrict g2 = g0 + 2 * D;
  float* __restrict g3 = g0 + 3 * D;
  std::fill(g0, g0 + kTile * D, 0.0f);
  const float* __restrict q0 = sc.qt.data();
  const float* __restrict q1 = q0 + D;
  const float* __restrict q2 = q0 + 2 * D;
  const float* __restrict q3 = q0 + 3 * D;
  const float* __restrict e0 = sc.dot.data();
  const float* __restrict e1 = e0 + D;
  const float* __restrict e2 = e0 + 2 * D;
  const float* __restrict e3 = e0 + 3 * D;
  const float* s = sc.s.data();
  const float* ds = sc.dp.data();
  for (std::int64_t j = 0; j < nmax; ++j) {
    const float d0 = ds[j], d1 = ds[tk + j], d2 = ds[2 * tk + j], d3 = ds[3 * tk + j];
    const float p0 = s[j], p1 = s[tk + j], p2 = s[2 * tk + j], p3 = s[3 * tk + j];
    const float* __restrict kr = sc.kp.data() + j * D;
    float* __restrict dkr = sc.dkl.data() + j * D;
    float* __restrict dvr = sc.dvl.data() + j * D;
    for (std::int64_t d = 0; d < D; ++d) {
      const float kd = kr[d];
      g0[d] += d0 * kd;
      g1[d] += d1 * kd;
      g2[d] += d2 * kd;
      g3[d] += d3 * kd;
      dkr[d] += (d0 * q0[d] + d1 * q1[d]) + (d2 * q2[d] + d3 * q3[d]);
      dvr[d] += (p0 * e0[d] + p1 * e1[d]) + (p2 * e2[d] + p3 * e3[d]);
    }
  }
}

}  // namespace

void attention_fwd_block(const AttnShape& a, const float* q, Positions qpos, const float* k, const float* v,
                         Positions kpos, float* out, float* lse) {
  const std::int64_t H = a.heads, Hkv = a.kv_heads, D = a.head_dim, group = H / Hkv;
  const auto tq = static_cast<std::int64_t>(qpos.size()), tk = static_cast<std::int64_t>(kpos.size());
  auto& sc = scratch();
  visible_counts(a, qpos, kpos, sc.vis, sc.first);
  grow_all({&sc.kt, &sc.vp}, {&sc.s}, {&sc.qt, &sc.ot}, D, tk);
  for (std::int64_t b = 0; b < a.batch; ++b) {
    for (std::int64_t hk = 0; hk < Hkv; ++hk) {
      pack_kv(k, b, tk, Hkv, hk, D, nullptr, sc.kt.data());
      pack_kv(v, b, tk, Hkv, hk, D, sc.vp.data(), nullptr);
      for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (std::int64_t i0 = 0; i0 < tq; i0 += kTile) {
          const std::int64_t rows = std::min<std::int64_t>(kTile, tq - i0);
          const std::int64_t nmax = tile_reach(sc, i0, rows);
          load_rows(q, b, i0, rows, tq, H, h, D, sc.qt.data());
          scores_tile(sc.qt.data(), sc.kt.data(), tk, nmax, D, sc.s.data());
          // Softmax per row: p = exp(scale*s - m), zero past the row's visible prefix.
          float m[kTile], inv[kTile], lrow[kTile];
          for (std::int64_t r = 0; r < kTile; ++r) {
            float* s = sc.s.data() + r * tk;
            const std::int64_t n = r < rows ? sc.vis[std::size_t(i0 + r)] : 0;
            const std::int64_t j0 = r < rows ? sc.first[std::size_t(i0 + r)] : 0;
            float mx = kNegInf;
            for (std::int64_t j = j0; j < n; ++j) mx = std::max(mx, s[j] * a.scale);
            double l = 0;
            for (std::int64_t j = j0; j < n; ++j) {
              s[j] = std::exp(s[j] * a.scale - mx);
              l += s[j];
            }
            for (std::int64_t j = 0; j < std::min(j0, nmax); ++j) s[j] = 0.0f;
            for (std::int64_t j = std::max(n, j0); j < nmax; ++j) s[j] = 0.0f;
            m[r] = mx;
            lrow[r] = static_cast<float>(l);
            inv[r] = n > j0 ? static_cast<float>(1.0 / l) : 0.0f;
          }
          // O tile = P V.
          float* __restrict o0 = sc.ot.data();
          float* __restrict o1 = o0 + D;
          float* __restrict o2 = o0 + 2 * D;
          float* __restrict o3 = o0 + 3 * D;
          std::fill(o0, o0 + kTile * D, 0.0f);
          const float* s = sc.s.data();
          for (std::int64_t j = 0; j < nmax; ++j) {
            const float p0 = s[j], p1 = s[tk + j], p2 = s[2 * tk + j], p3 = s[3 * tk + j];
            const float* __restrict vr = sc.vp.data() + j * D;
            for (std::int64_t d = 0; d < D; ++d) {
              const float x = vr[d];
              o0[d] += p0 * x;
              o1[d] += p1 * x;
              o2[d] += p2 * x;
              o3[d] += p3 * x;
            }
          }
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t i = i0 + r;
            float* dst = out + ((b * tq + i) * H + h) * D;
            const float* src = sc.ot.data() + r * D;
            for (std::int64_t d = 0; d < D; ++d) dst[d] = src[d] * inv[r];
            lse[(b * H + h) * tq + i] =
                sc.vis[std::size_t(i)] > sc.first[std::size_t(i)] ? m[r] + std::log(lrow[r]) : kNegInf;
          }
        }
      }
    }
  }
}

void merge_out(const AttnShape& a, std::int64_t tokens, const float* o_part, const float* lse_part, float* o_acc,
               float* lse_acc) {
  const std::int64_t H = a.heads, D = a.head_dim;
  for (std::int64_t b = 0; b < a.batch; ++b)
    for (std::int64_t i = 0; i < tokens; ++i)
      for (std::int64_t h = 0; h < H; ++h) {
        const std::int64_t li = (b * H + h) * tokens + i;
        const float l2 = lse_part[li];
        if (l2 == kNegInf) continue;  // an empty partial changes nothing
        float* o1 = o_acc + ((b * tokens + i) * H + h) * D;
        const float* o2 = o_part + ((b * tokens + i) * H + h) * D;
        const float l1 = lse_acc[li];
        if (l1 == kNegInf) {
          std::memcpy(o1, o2, sizeof(float) * std::size_t(D));
          lse_acc[li] = l2;
          continue;
        }
        const float hi = std::max(l1, l2), lo = std::min(l1, l2);
        const float l = hi + std::log1p(std::exp(lo - hi));
        const float w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
        for (std::int64_t d = 0; d < D; ++d) o1[d] = w1 * o1[d] + w2 * o2[d];
        lse_acc[li] = l;
      }
}

void bundle_delta(const AttnShape& a, std::int64_t tokens, const float* dout, const float* out, float* delta) {
  const std::int64_t H = a.heads, D = a.head_dim;
  for (std::int64_t b = 0; b < a.batch; ++b)
    for (std::int64_t i = 0; i < tokens; ++i)
      for (std::int64_t h = 0; h < H; ++h) {
        const float* x = dout + ((b * tokens + i) * H + h) * D;
        const float* y = out + ((b * tokens + i) * H + h) * D;
        double s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += double(x[d]) * double(y[d]);
        delta[(b * H + h) * tokens + i] = static_cast<float>(s);
      }
}

void attention_bwd_block(const AttnShape& a, const float* q, const float* dout, const float* lse, const float* delta,
                         Positions qpos, const float* k, const float* v, Positions kpos, float* dq, float* dk,
                         float* dv) {
  const std::int64_t H = a.heads, Hkv = a.kv_heads, D = a.head_dim, group = H / Hkv;
  const auto tq = static_cast<std::int64_t>(qpos.size()), tk = static_cast<std::int64_t>(kpos.size());
  auto& sc = scratch();
  visible_counts(a, qpos, kpos, sc.vis, sc.first);
  grow_all({&sc.kt, &sc.kp, &sc.vt, &sc.dkl, &sc.dvl}, {&sc.s, &sc.dp}, {&sc.qt, &sc.dot, &sc.dqt}, D, tk);
  for (std::int64_t b = 0; b < a.batch; ++b) {
    for (std::int64_t hk = 0; hk < Hkv; ++hk) {
      pack_kv(k, b, tk, Hkv, hk, D, sc.kp.data(), sc.kt.data());
      pack_kv(v, b, tk, Hkv, hk, D, nullptr, sc.vt.data());
      std::fill(sc.dkl.begin(), sc.dkl.begin() + D * tk, 0.0f);
      std::fill(sc.dvl.begin(), sc.dvl.begin() + D * tk, 0.0f);
      std::int64_t kmax = 0;  // keys any row touched (others keep zero gradients)
      for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
        for (std::int64_t i0 = 0; i0 < tq; i0 += kTile) {
          const std::int64_t rows = std::min<std::int64_t>(kTile, tq - i0);
          const std::int64_t nmax = tile_reach(sc, i0, rows);
          if (nmax == 0) continue;
          kmax = std::max(kmax, nmax);
          load_rows(q, b, i0, rows, tq, H, h, D, sc.qt.data());
          load_rows(dout, b, i0, rows, tq, H, h, D, sc.dot.data());
          scores_tile(sc.qt.data(), sc.kt.data(), tk, nmax, D, sc.s.data());    // S
          scores_tile(sc.dot.data(), sc.vt.data(), tk, nmax, D, sc.dp.data());  // dP = dO V^T
          // s := P, dp := dS = P * (dP - delta).
          probabilities_and_ds(a, sc, lse + (b * H + h) * tq + i0, delta + (b * H + h) * tq + i0, i0, rows, tk, nmax);
          tile_gradients(sc, tk, nmax, D);
          for (std::int64_t r = 0; r < rows; ++r) {
            float* dst = dq + ((b * tq + i0 + r) * H + h) * D;
            const float* src = sc.dqt.data() + r * D;
            for (std::int64_t d = 0; d < D; ++d) dst[d] += a.scale * src[d];
          }
        }
      }
      for (std::int64_t j = 0; j < kmax; ++j) {
        float* dkd = dk + ((b * tk + j) * Hkv + hk) * D;
        float* dvd = dv + ((b * tk + j) * Hkv + hk) * D;
        const float* dks = sc.dkl.data() + j * D;
        const float* dvs = sc.dvl.data() + j * D;
        for (std::int64_t d = 0; d < D; ++d) {
          dkd[d] += a.scale * dks[d];
          dvd[d] += dvs[d];
        }
      }
    }
  }
}

}  // namespace charm::rt
