#include "runtime/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace charm::rt {

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
  const auto rows = static_cast<std::size_t>(S * D);
  std::vector<double> q(rows), k(rows), v(rows), g(rows), kt(rows), vt(rows), p(static_cast<std::size_t>(S)),
      dp(static_cast<std::size_t>(S));
  // [S, D] -> [D, S], so that row-times-matrix products run over contiguous j.
  auto transpose = [&](const std::vector<double>& x, std::vector<double>& xt) {
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t d = 0; d < D; ++d) xt[std::size_t(d * S + s)] = x[std::size_t(s * D + d)];
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
      load(in.q, b, H, h, q);
      load(in.k, b, Hkv, hk, k);
      load(in.v, b, Hkv, hk, v);
      if (backward) load(in.dout, b, H, h, g);
      transpose(k, kt);
      transpose(v, vt);
      for (std::int64_t i = 0; i < S; ++i) {
        // Row i sees keys [j0, n): causal up to itself, from its document's start or its window's.
        const std::int64_t n = w.causal ? i + 1 : S;
        const std::int64_t j0 = w.position_mask() ? w.first_visible(i) : 0;
        std::fill(p.begin(), p.begin() + n, 0.0);
        for (std::int64_t d = 0; d < D; ++d) {
          const double qd = q[std::size_t(i * D + d)];
          const double* kd = kt.data() + d * S;
          for (std::int64_t j = j0; j < n; ++j) p[std::size_t(j)] += qd * kd[j];
        }
        double m = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = j0; j < n; ++j) m = std::max(m, p[std::size_t(j)] *= scale);
        double l = 0;
        for (std::int64_t j = j0; j < n; ++j) l += (p[std::size_t(j)] = std::exp(p[std::size_t(j)] - m));
        const double lse = m + std::log(l);
        ref.lse[std::size_t((b * H + h) * S + i)] = lse;
        double* o = ref.out.data() + ((b * S + i) * H + h) * D;
        for (std::int64_t j = j0; j < n; ++j) {
          const double pj = p[std::size_t(j)] / l;
          p[std::size_t(j)] = pj;
          for (std::int64_t d = 0; d < D; ++d) o[d] += pj * v[std::size_t(j * D + d)];
        }
        if (!backward) continue;
        // dP = dO V^T, D = rowsum(dO * O), dS = P (dP - D).
        double delta = 0;
        for (std::int64_t d = 0; d < D; ++d) delta += g[std::size_t(i * D + d)] * o[d];
        double* dqi = ref.dq.data() + ((b * S + i) * H + h) * D;
        std::fill(dp.begin(), dp.begin() + n, 0.0);
        for (std::int64_t d = 0; d < D; ++d) {
          const double gd = g[std::size_t(i * D + d)];
          const double* vd = vt.data() + d * S;
          for (std::int64_t j = j0; j < n; ++j) dp[std::size_t(j)] += gd * vd[j];
        }
        for (std::int64_t j = j0; j < n; ++j) {
          const double ds = p[std::size_t(j)] * (dp[std::size_t(j)] - delta);
          double* dkj = ref.dk.data() + ((b * S + j) * Hkv + hk) * D;
          double* dvj = ref.dv.data() + ((b * S + j) * Hkv + hk) * D;
          for (std::int64_t d = 0; d < D; ++d) {
            dqi[d] += scale * ds * k[std::size_t(j * D + d)];
            dkj[d] += scale * ds * q[std::size_t(i * D + d)];
            dvj[d] += p[std::size_t(j)] * g[std::size_t(i * D + d)];
          }
        }
      }
    }
  return ref;
}

}  // namespace charm::rt
