// The statistics of a `charm calibrate` fit: the parameters' uncertainty, the speedup pairs, the rows'
// predictions, leave-one-out and the MAPEs.

#include "calibrate/calibration_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "scheduler/planners/algorithms.hpp"

namespace charm::calib::detail {

namespace {

double mean_abs_pct(const std::vector<double>& ratios) {
  if (ratios.empty()) return kNaN;
  double s = 0;
  for (double r : ratios) s += std::abs(r - 1);
  return 100 * s / double(ratios.size());
}

std::string row_key(const Measurement& m, int ranks) {
  const auto& w = m.workload;
  return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}/{}/{}", to_string(w.pass), w.batch, w.seq, w.heads, w.kv_heads,
                     w.head_dim, to_string(w.dtype), w.causal, to_string(w.layout), ranks);
}

}  // namespace

Expected<Sensitivity> sensitivity_at(const Model& model, const std::vector<double>& best,
                                     const std::vector<double>& predicted) {
  const std::vector<char> all(model.measured.size(), 1);
  const std::size_t np = model.params.size();
  Sensitivity s{{}, residuals(model, predicted, all), std::vector<char>(np, 0)};
  std::vector<std::vector<double>> points;
  std::vector<double> width(np, 0.0);
  for (std::size_t k = 0; k < np; ++k) {
    const auto& q = model.params[k];
    const bool log_scale = q.bounds.scale == Scale::Log;
    const double theta = log_scale ? std::log(best[k]) : best[k];
    const double lo = log_scale ? std::log(q.bounds.lo) : q.bounds.lo,
                 hi = log_scale ? std::log(q.bounds.hi) : q.bounds.hi;
    const double h = log_scale ? 1e-3 : 1e-3 * (q.bounds.hi - q.bounds.lo);
    const double up = std::min(theta + h, hi), down = std::max(theta - h, lo);
    width[k] = up - down;
    for (double th : {up, down}) {
      auto v = best;
      v[k] = std::clamp(log_scale ? std::exp(th) : th, q.bounds.lo, q.bounds.hi);
      points.push_back(std::move(v));
    }
  }
  model.progress.begin("uncertainty");
  auto pred = model.predict_at(points, {all});
  if (!pred) return pred.error();
  s.J.assign(s.r.size(), std::vector<double>(np, 0.0));
  for (std::size_t k = 0; k < np; ++k) {
    if (!(width[k] > 0)) continue;
    const auto ru = residuals(model, (*pred)[2 * k], all), rd = residuals(model, (*pred)[2 * k + 1], all);
    for (std::size_t i = 0; i < s.r.size(); ++i) {
      s.J[i][k] = (ru[i] - rd[i]) / width[k];
      s.moves[k] = s.moves[k] || s.J[i][k] != 0;
    }
  }
  return s;
}

/// Each parameter's uncertainty, sigma^2 (J^T J)^-1 at the fit (residuals: the rows' and the speedups');
/// the values, sigmas and notes go into model.params.
/// The pairs of identified parameters whose estimates correlate above 0.9 in magnitude are returned: the
/// rows tell their combination, not each alone.
std::vector<Correlation> estimate_uncertainty(Model& model, const Sensitivity& s, const std::vector<double>& best,
                                              const std::vector<double>& best_u, double objective) {
  const std::size_t N = s.r.size(), np = model.params.size();
  // The covariance of the parameters the rows move (one that moves none would make J^T J singular).
  Matrix jtj;
  std::vector<double> jtr;
  normal_equations(s.J, s.r, {}, s.moves, jtj, jtr);
  std::vector<std::size_t> cols;
  for (std::size_t k = 0; k < np; ++k)
    if (s.moves[k]) cols.push_back(k);
  const auto sub_inv = invert(submatrix(jtj, cols));
  std::optional<Matrix> inv;
  if (sub_inv) {
    inv.emplace(np, std::vector<double>(np, 0.0));
    for (std::size_t a = 0; a < cols.size(); ++a)
      for (std::size_t b = 0; b < cols.size(); ++b) (*inv)[cols[a]][cols[b]] = (*sub_inv)[a][b];
  }
  const bool dof = N > np;
  const double sigma2 = dof ? objective / double(N - np) : kNaN;
  for (std::size_t k = 0; k < np; ++k) {
    auto& q = model.params[k];
    q.value = best[k];
    q.at_bound = best_u[k] < 1e-4 || best_u[k] > 1 - 1e-4;
    if (!s.moves[k]) {
      q.note = "not identified: no row depends on it";
    } else if (!inv) {
      q.note = "not identified: its effect on the rows is the same as other parameters' (J^T J is singular)";
    } else if (dof) {
      const double sd = std::sqrt(std::max(0.0, sigma2 * (*inv)[k][k]));
      if (q.bounds.scale == Scale::Log) {
        q.relative_sigma = sd;
        q.sigma = sd * q.value;
      } else {
        q.sigma = sd;
        q.relative_sigma = q.value > 0 ? sd / q.value : kNaN;
      }
    }
    if (!dof && q.note.empty()) q.note = "no uncertainty: as many parameters as rows";
    if (q.at_bound)
      q.note += fmt::format("{}at its {} bound (the uncertainty is one-sided there)", q.note.empty() ? "" : "; ",
                            best_u[k] < 0.5 ? "lower" : "upper");
  }
  std::vector<Correlation> out;
  if (inv)
    for (const auto& c : correlated_pairs(*inv, 0.9))
      out.push_back({model.params[c.a].path, model.params[c.b].path, c.r});
  return out;
}

/// Every run paired with the ring run of its workload and GPUs (speedup = ring time / its time).
std::vector<SpeedupPair> speedup_pairs(const MeasurementSet& data, const std::vector<Row>& rows) {
  std::vector<SpeedupPair> pairs;
  std::map<std::string, std::size_t> ring_of;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (data.rows[i].algo == sched::baseline_algorithm() && data.rows[i].metric == Metric::Time)
      ring_of.emplace(row_key(data.rows[i], rows[i].ranks), i);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (data.rows[i].algo == sched::baseline_algorithm() || data.rows[i].metric != Metric::Time) continue;
    if (auto it = ring_of.find(row_key(data.rows[i], rows[i].ranks)); it != ring_of.end())
      pairs.push_back({it->second, i});
  }
  return pairs;
}

/// The base's and the fit's prediction of every run (the first n) and kernel time into c.
void record_predictions(const Model& model, const std::vector<double>& base_ms, const std::vector<double>& pred,
                        std::size_t n, const std::string& kernel_source, Calibration& c) {
  c.rows.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    c.rows[i].ranks = model.rows[i].ranks;
    c.rows[i].domains = model.rows[i].domains;
    c.rows[i].base_ms = base_ms[i];
    c.rows[i].predicted_ms = pred[i];
  }
  std::vector<double> kb, kf;
  for (std::size_t k = 0; k < model.kernels.size(); ++k) {
    c.kernel_rows.push_back({model.kernels[k], base_ms[n + k], pred[n + k]});
    kb.push_back(base_ms[n + k] / model.measured[n + k]);
    kf.push_back(pred[n + k] / model.measured[n + k]);
  }
  c.kernels = {mean_abs_pct(kb), mean_abs_pct(kf), kNaN};
  c.kernel_source = kernel_source;
}

namespace {

/// The parameter values one Gauss-Newton step from the full fit reaches without row i (the influence
/// approximation of a refit without it): the residuals that involve row i dropped, the parameters at a
/// bound or moving no residual held.
std::vector<double> one_step_without(const Model& model, const Sensitivity& s,
                                     const std::vector<std::pair<std::size_t, std::size_t>>& owners,
                                     const std::vector<double>& best, const std::vector<double>& best_u,
                                     std::size_t i) {
  const std::size_t np = best.size();
  std::vector<char> keep(owners.size()), free_cols(np);
  for (std::size_t k = 0; k < owners.size(); ++k) keep[k] = owners[k].first != i && owners[k].second != i;
  std::vector<std::size_t> cols;
  for (std::size_t k = 0; k < np; ++k)
    if (s.moves[k] && best_u[k] > 1e-4 && best_u[k] < 1 - 1e-4) cols.push_back(k);
  for (std::size_t k : cols) free_cols[k] = 1;
  Matrix jtj;
  std::vector<double> jtr;
  normal_equations(s.J, s.r, keep, free_cols, jtj, jtr);
  std::vector<double> b(cols.size());
  for (std::size_t x = 0; x < cols.size(); ++x) b[x] = -jtr[cols[x]];
  const auto d = solve_spd(submatrix(jtj, cols), std::move(b));
  auto v = best;
  for (std::size_t x = 0; x < cols.size(); ++x) {
    const auto& q = model.params[cols[x]];
    const double moved = q.bounds.scale == Scale::Log ? v[cols[x]] * std::exp(d[x]) : v[cols[x]] + d[x];
    v[cols[x]] = std::clamp(moved, q.bounds.lo, q.bounds.hi);
  }
  return v;
}

/// Rows `which` each predicted by a refit without it, started from the full fit: the exact leave-one-out
/// (a small first step: one row less moves the optimum a little).
Expected<std::vector<double>> exact_without(const Model& model, const std::vector<double>& best_u,
                                            const std::vector<std::size_t>& which, const std::string& stage) {
  const std::size_t N = model.measured.size();
  model.progress.begin(stage, int(which.size()));
  std::vector<Objective> objs;
  for (const std::size_t i : which) {
    objs.push_back(Objective{model, std::vector<char>(N, 1), HUGE_VAL, {}, {}});
    objs.back().use[i] = 0;
  }
  if (auto st = run_searches(model, objs, std::vector<std::vector<double>>(which.size(), best_u), 0.02); !st)
    return st.error();
  std::vector<std::vector<double>> points;
  std::vector<std::vector<char>> uses;
  for (std::size_t k = 0; k < which.size(); ++k) {
    points.push_back(values_of(model.params, objs[k].best_u));
    uses.emplace_back(N, 0);
    uses.back()[which[k]] = 1;
  }
  auto p = model.predict_at(points, uses);
  if (!p) return p.error();
  std::vector<double> out;
  for (std::size_t k = 0; k < which.size(); ++k) out.push_back((*p)[k][which[k]]);
  return out;
}

}  // namespace

/// Leave-one-out: each of the n measured rows predicted without it, by options.leave_one_out's method.
/// One-step: the most influential rows (the largest move from the in-sample prediction) are refitted
/// exactly too, and both figures kept in c.loo_checks.
Status leave_one_out(const Model& model, const Sensitivity& s, const std::vector<double>& best,
                     const std::vector<double>& best_u, std::size_t n, const CalibrationOptions& options,
                     Calibration& c) {
  c.loo = options.leave_one_out;
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  if (options.leave_one_out == LeaveOneOut::Exact) {
    auto v = exact_without(model, best_u, order, "leave-one-out, exact refits");
    if (!v) return v.error();
    for (std::size_t i = 0; i < n; ++i) c.rows[i].loo_ms = (*v)[i];
    return {};
  }
  const std::size_t N = model.measured.size();
  std::vector<std::vector<double>> points;
  std::vector<std::vector<char>> uses;
  const auto owners = residual_rows(model);
  for (std::size_t i = 0; i < n; ++i) {
    points.push_back(one_step_without(model, s, owners, best, best_u, i));
    uses.emplace_back(N, 0);
    uses.back()[i] = 1;
  }
  model.progress.begin("leave-one-out, one step each");
  auto pred = model.predict_at(points, uses);
  if (!pred) return pred.error();
  for (std::size_t i = 0; i < n; ++i) c.rows[i].loo_ms = (*pred)[i][i];
  auto moved = [&](std::size_t i) { return std::abs(std::log(c.rows[i].loo_ms / c.rows[i].predicted_ms)); };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return moved(x) > moved(y); });
  order.resize(std::min<std::size_t>(n, std::size_t(std::max(0, options.loo_checks))));
  auto exact = exact_without(model, best_u, order, "leave-one-out, exact refits to check");
  if (!exact) return exact.error();
  for (std::size_t k = 0; k < order.size(); ++k)
    c.loo_checks.push_back({order[k], c.rows[order[k]].loo_ms, (*exact)[k]});
  return {};
}

/// The MAPEs of times, components and speedups (base, in-sample, leave-one-out).
void summarize_errors(const MeasurementSet& data, std::size_t n, Calibration& c) {
  std::vector<double> rb, rf, rl, sb, sf, sl, cb, cf, cl;
  for (std::size_t i = 0; i < n; ++i) {
    const double m = data.rows[i].time_ms;
    const bool run = data.rows[i].metric == Metric::Time;
    (run ? rb : cb).push_back(c.rows[i].base_ms / m);
    (run ? rf : cf).push_back(c.rows[i].predicted_ms / m);
    if (!std::isnan(c.rows[i].loo_ms)) (run ? rl : cl).push_back(c.rows[i].loo_ms / m);
  }
  c.time_rows = rb.size();
  c.component = {mean_abs_pct(cb), mean_abs_pct(cf), mean_abs_pct(cl)};
  for (const auto& pr : c.pairs) {
    const auto &r = c.rows[pr.ring], &o = c.rows[pr.other];
    const double measured = data.rows[pr.ring].time_ms / data.rows[pr.other].time_ms;
    sb.push_back(r.base_ms / o.base_ms / measured);
    sf.push_back(r.predicted_ms / o.predicted_ms / measured);
    if (!std::isnan(r.loo_ms) && !std::isnan(o.loo_ms)) sl.push_back(r.loo_ms / o.loo_ms / measured);
  }
  c.time = {mean_abs_pct(rb), mean_abs_pct(rf), mean_abs_pct(rl)};
  c.speedup = {mean_abs_pct(sb), mean_abs_pct(sf), mean_abs_pct(sl)};
  if (c.speedup.in_sample > c.speedup.base)
    c.notes.push_back(fmt::format("the fitted model predicts speedups over ring worse than the base ({:.1f}% "
                                  "against {:.1f}% MAPE): the fit traded them for times; check the rows",
                                  c.speedup.in_sample, c.speedup.base));
}

}  // namespace charm::calib::detail
