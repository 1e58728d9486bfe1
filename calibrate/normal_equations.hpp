#pragma once
// The linear algebra of the calibration's Gauss-Newton statistics: the normal equations of a
// residual Jacobian, over a subset of residuals (leave-one-out drops a row's) and of parameters
// (those held at a bound), and their small dense solves. Sizes are the parameters' (ten or so).

#include <cstddef>
#include <optional>
#include <vector>

#include "support/expected.hpp"

namespace charm::calib {

using Matrix = std::vector<std::vector<double>>;

/// Inverse of a small symmetric positive semi-definite matrix (Gauss-Jordan with pivoting);
/// nullopt when it is singular (a parameter no residual moves).
[[nodiscard]] std::optional<Matrix> invert(Matrix a);

/// x with (a + ridge) x = b, a symmetric positive semi-definite; the ridge (1e-12 of the largest
/// diagonal) keeps a parameter no residual moves at its place instead of failing.
[[nodiscard]] std::vector<double> solve_spd(Matrix a, std::vector<double> b);

/// J^T J and J^T r over the residuals whose `keep` is set (all when keep is empty), on the columns
/// whose `free_cols` is set (all when empty; the others' rows and columns are zero).
void normal_equations(const Matrix& J, const std::vector<double>& r, const std::vector<char>& keep,
                      const std::vector<char>& free_cols, Matrix& jtj, std::vector<double>& jtr);

/// The rows and columns `keep` of a square matrix, in that order.
[[nodiscard]] Matrix submatrix(const Matrix& a, const std::vector<std::size_t>& keep);

struct Correlated {
  std::size_t a = 0, b = 0;  // a < b
  double r = 0;
};
/// The pairs of a covariance matrix's coordinates whose correlation exceeds `threshold` in magnitude,
/// in (a, b) order; coordinates of zero variance (not estimated) are left out.
[[nodiscard]] std::vector<Correlated> correlated_pairs(const Matrix& cov, double threshold);

}  // namespace charm::calib
