#include "runtime/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace charm::rt {

namespace {

/// One (batch, head)'s rows in fp64, [S, D] (kt, vt: [D, S]), and the scratch rows p and dp.
struct HeadRows {
  std::vector<double> q, k, v, g, kt, vt, p, dp;
  HeadRows(std::int64_t S, std::int64_t D)
      : q(std::size_t(S * D)), k(q.size()), v(q.size()), g(q.size()), kt(q.size()), vt(q.size()), p(std::size_t(S)),
        dp(std::size_t(S)) {}
};

/// Query row i over keys [j0, n): p = softmax(q_i K^T * scale), o += p V; returns the row's LSE.
double forward_row(HeadRows& x, std::int64_t i, std::int64_t j0, std::int64_t n, std::int64_t S, std::int64_t D,
                   double scale, double* o) {
  std::fill(x.p.begin(), x.p.begin() + n, 0.0);
  for (std::int64_t d = 0; d < D; ++d) {
    const double qd = x.q[std::size_t(i * D + d)];
    const double* kd = x.kt.data() + d * S;
    for (std::int64_t j = j0; j < n; ++j) x.p[std::size_t(j)] += qd * kd[j];
  }
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = j0; j < n; ++j) m = std::max(m, x.p[std::size_t(j)] *= scale);
  double l = 0;
  for (std::int64_t j = j0; j < n; ++j) l += (x.p[std::size_t(j)] = std::exp(x.p[std::size_t(j)] - m));
  for (std::int64_t j = j0; j < n; ++j) {
    const double pj = x.p[std::size_t(j)] / l;
    x.p[std::size_t(j)] = pj;
    for (std::int64_t d = 0; d < D; ++d) o[d] += pj * x.v[std::size_t(j * D + d)];
  }
  return m + std::log(l);
}

/// The same row backward, with p from forward_row: dP = dO V^T, D = rowsum(dO * O), dS = P (dP - D);
/// dq_i, and every dk_j, dv_j of the row's keys (rows of `dk`, `dv` `stride` apart).
void backward_row(HeadRows& x, std::int64_t i, std::int64_t j0, std::int64_t n, std::int64_t S, std::int64_t D,
                  double scale, const double* o, double* dqi, double* dk, double* dv, std::int64_t stride) {
  double delta = 0;
  for (std::int64_t d = 0; d < D; ++d) delta += x.g[std::size_t(i * D + d)] * o[d];
  std::fill(x.dp.begin(), x.dp.begin() + n, 0.0);
  for (std::int64_t d = 0; d < D; ++d) {
    const double gd = x.g[std::size_t(i * D + d)];
    const double* vd = x.vt.data() + d * S;
    for (std::int64_t j = j0; j < n; ++j) x.dp[std::size_t(j)] += gd * vd[j];
  }
  for (std::int64_t j = j0; j < n; ++j) {
    const double ds = x.p[std::size_t(j)] * (x.dp[std::size_t(j)] - delta);
    double* dkj = dk + j * stride;
    double* dvj = dv + j * stride;
    for (std::int64_t d = 0; d < D; ++d) {
      dqi[d] += scale * ds * x.k[std::size_t(j * D + d)];
      dkj[d] += scale * ds * x.q[std::size_t(i * D + d)];
      dvj[d] += x.p[std::size_t(j)] * x.g[std::size_t(i * D + d)];
    }
  }
}

}  // namespace

Reference reference_attention(const ir::Workload& w, const GlobalTensors& in, bool backward) {
  const std::int64_t B = w.batch, S = w.seq, H = w.heads, Hkv = w.kv_heads, D = w.head_dim, group = H / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  Reference ref;
  ref.out.assign(std::size_t(B * S * H * D), 0.0);
  ref.lse.assign(std::size_t(B * H * S), -std::numeric_limits<double>::infinity());
  if (backward) {
    ref.dq.assign(std::size_t(B * S * H * D), 0.0);
    ref.dk.assign(std::size_t(B * S * Hkv * D), 0.0);
    ref.dv.assign(std::size_t(B * S * Hkv * D), 0.0);
  }
  HeadRows x(S, D);
  // [S, D] -> [D, S], so that row-times-matrix products run over contiguous j.
  auto transpose = [&](const std::vector<double>& a, std::vector<double>& at) {
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t d = 0; d < D; ++d) at[std::size_t(d * S + s)] = a[std::size_t(s * D + d)];
  };
  auto load = [&](const std::vector<float>& src, std::int64_t b, std::int64_t heads, std::int64_t h,
                  std::vector<double>& dst) {
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t d = 0; d < D; ++d)
        dst[std::size_t(s * D + d)] = src[std::size_t(((b * S + s) * heads + h) * D + d)];
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t hk = h / group;
      load(in.q, b, H, h, x.q);
      load(in.k, b, Hkv, hk, x.k);
      load(in.v, b, Hkv, hk, x.v);
      if (backward) load(in.dout, b, H, h, x.g);
      transpose(x.k, x.kt);
      transpose(x.v, x.vt);
      for (std::int64_t i = 0; i < S; ++i) {
        // Row i sees keys [j0, n): causal up to itself, from its document's start or its window's.
        const std::int64_t n = w.causal ? i + 1 : S;
        const std::int64_t j0 = w.position_mask() ? w.first_visible(i) : 0;
        double* o = ref.out.data() + ((b * S + i) * H + h) * D;
        ref.lse[std::size_t((b * H + h) * S + i)] = forward_row(x, i, j0, n, S, D, scale, o);
        if (backward)
          backward_row(x, i, j0, n, S, D, scale, o, ref.dq.data() + ((b * S + i) * H + h) * D,
                       ref.dk.data() + (b * S * Hkv + hk) * D, ref.dv.data() + (b * S * Hkv + hk) * D, Hkv * D);
      }
    }
  return ref;
}

}  // namespace charm::rt
