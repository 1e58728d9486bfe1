#include "calibrate/normal_equations.hpp"

#include <algorithm>
#include <cmath>

namespace charm::calib {

Matrix submatrix(const Matrix& a, const std::vector<std::size_t>& keep) {
  Matrix out(keep.size(), std::vector<double>(keep.size()));
  for (std::size_t x = 0; x < keep.size(); ++x)
    for (std::size_t y = 0; y < keep.size(); ++y) out[x][y] = a[keep[x]][keep[y]];
  return out;
}

std::optional<Matrix> invert(Matrix a) {
  const std::size_t n = a.size();
  double scale = 0;
  for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(a[i][i]));
  if (!(scale > 0)) return std::nullopt;
  Matrix inv(n, std::vector<double>(n, 0.0));
  for (std::size_t i = 0; i < n; ++i) inv[i][i] = 1;
  for (std::size_t c = 0; c < n; ++c) {
    std::size_t piv = c;
    for (std::size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < 1e-12 * scale) return std::nullopt;
    std::swap(a[c], a[piv]);
    std::swap(inv[c], inv[piv]);
    const double d = a[c][c];
    for (std::size_t k = 0; k < n; ++k) {
      a[c][k] /= d;
      inv[c][k] /= d;
    }
    for (std::size_t r = 0; r < n; ++r) {
      if (r == c || a[r][c] == 0) continue;
      const double m = a[r][c];
      for (std::size_t k = 0; k < n; ++k) {
        a[r][k] -= m * a[c][k];
        inv[r][k] -= m * inv[c][k];
      }
    }
  }
  return inv;
}

std::vector<double> solve_spd(Matrix a, std::vector<double> b) {
  const std::size_t n = a.size();
  double scale = 0;
  for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, a[i][i]);
  const double ridge = scale > 0 ? 1e-12 * scale : 1e-300;
  for (std::size_t i = 0; i < n; ++i) a[i][i] += ridge;
  // Cholesky: a = L L^T, in place below the diagonal.
  for (std::size_t j = 0; j < n; ++j) {
    double d = a[j][j];
    for (std::size_t k = 0; k < j; ++k) d -= a[j][k] * a[j][k];
    d = std::sqrt(std::max(d, ridge));
    a[j][j] = d;
    for (std::size_t i = j + 1; i < n; ++i) {
      double s = a[i][j];
      for (std::size_t k = 0; k < j; ++k) s -= a[i][k] * a[j][k];
      a[i][j] = s / d;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < i; ++k) b[i] -= a[i][k] * b[k];
    b[i] /= a[i][i];
  }
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t k = i + 1; k < n; ++k) b[i] -= a[k][i] * b[k];
    b[i] /= a[i][i];
  }
  return b;
}

void normal_equations(const Matrix& J, const std::vector<double>& r, const std::vector<char>& keep,
                      const std::vector<char>& free_cols, Matrix& jtj, std::vector<double>& jtr) {
  const std::size_t n = J.empty() ? 0 : J.front().size();
  jtj.assign(n, std::vector<double>(n, 0.0));
  jtr.assign(n, 0.0);
  auto is_free = [&](std::size_t k) { return free_cols.empty() || free_cols[k]; };
  for (std::size_t i = 0; i < J.size(); ++i) {
    if (!keep.empty() && !keep[i]) continue;
    for (std::size_t a = 0; a < n; ++a) {
      if (!is_free(a)) continue;
      jtr[a] += J[i][a] * r[i];
      for (std::size_t b = 0; b < n; ++b)
        if (is_free(b)) jtj[a][b] += J[i][a] * J[i][b];
    }
  }
}

std::vector<Correlated> correlated_pairs(const Matrix& cov, double threshold) {
  std::vector<Correlated> out;
  for (std::size_t a = 0; a < cov.size(); ++a)
    for (std::size_t b = a + 1; b < cov.size(); ++b) {
      const double va = cov[a][a], vb = cov[b][b];
      if (!(va > 0 && vb > 0)) continue;
      if (const double r = cov[a][b] / std::sqrt(va * vb); std::abs(r) > threshold) out.push_back({a, b, r});
    }
  return out;
}

}  // namespace charm::calib
