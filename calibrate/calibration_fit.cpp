// The optimiser of `charm calibrate`: the unit box the parameters move in, the residuals and the objective,
// bounded local searches (NLopt) and the fit from several starts.

#include "calibrate/calibration_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace charm::calib::detail {

// The unit box the optimizer moves in: u in [0, 1] per parameter.
double value_of(const FitParameter& p, double u) {
  u = std::clamp(u, 0.0, 1.0);
  const auto& b = p.bounds;
  const double x = b.scale == Scale::Log ? std::exp(std::log(b.lo) + u * (std::log(b.hi) - std::log(b.lo)))
                                         : b.lo + u * (b.hi - b.lo);
  return std::clamp(x, b.lo, b.hi);  // exp(log(hi)) may overshoot hi by an ulp, and efficiency must stay <= 1
}
double unit_of(const FitParameter& p, double x) {
  const auto& b = p.bounds;
  if (b.hi == b.lo) return 0;
  const double u = b.scale == Scale::Log ? (std::log(x) - std::log(b.lo)) / (std::log(b.hi) - std::log(b.lo))
                                         : (x - b.lo) / (b.hi - b.lo);
  return std::clamp(u, 0.0, 1.0);
}
std::vector<double> values_of(const std::vector<FitParameter>& ps, const std::vector<double>& u) {
  std::vector<double> v(ps.size());
  for (std::size_t k = 0; k < ps.size(); ++k) v[k] = value_of(ps[k], u[k]);
  return v;
}

/// The fit's residuals: each used row's log(predicted / measured), then each pair's (both rows used)
/// log(predicted speedup / measured speedup) times the square root of the speedups' weight.
std::vector<double> residuals(const Model& model, const std::vector<double>& predicted, const std::vector<char>& use) {
  const auto& measured = model.measured;
  std::vector<double> r;
  r.reserve(predicted.size() + model.pairs.size());
  for (std::size_t i = 0; i < predicted.size(); ++i)
    if (use[i]) r.push_back(std::log(predicted[i] / measured[i]));
  for (const auto& pr : model.pairs)
    if (use[pr.ring] && use[pr.other]) {
      const std::size_t a = pr.ring, b = pr.other;
      r.push_back(model.pair_scale * std::log(predicted[a] / predicted[b] * measured[b] / measured[a]));
    }
  return r;
}

double objective_of(const Model& model, const std::vector<double>& predicted, const std::vector<char>& use) {
  double f = 0;
  for (double r : residuals(model, predicted, use)) f += r * r;
  return f;
}

/// Which rows each residual of residuals(model, ., all) involves: a row's own, or a pair's two.
std::vector<std::pair<std::size_t, std::size_t>> residual_rows(const Model& model) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < model.measured.size(); ++i) out.emplace_back(i, i);
  for (const auto& pr : model.pairs) out.emplace_back(pr.ring, pr.other);
  return out;
}

namespace {

/// One bounded local search from `u0` (NLopt's BOBYQA); the best point seen is kept in `obj` whatever
/// NLopt's end.
Status local_search(Objective& obj, std::vector<double> u0, int max_evals, double initial_step) {
  const auto n = static_cast<unsigned>(u0.size());
  // BOBYQA models the objective as a quadratic and needs two dimensions at least.
  nlopt::opt o(n >= 2 ? nlopt::LN_BOBYQA : nlopt::LN_SBPLX, n);
  o.set_lower_bounds(std::vector<double>(n, 0.0));
  o.set_upper_bounds(std::vector<double>(n, 1.0));
  o.set_min_objective(&Objective::call, &obj);
  o.set_xtol_abs(1e-5);
  o.set_ftol_abs(1e-12);
  // Along a direction the rows hardly tell (a parameter with a sigma of 100% or more) BOBYQA keeps finding
  // gains in the tenth digit for hundreds of steps: a relative change below 1e-9 is the fit's end.
  o.set_ftol_rel(1e-9);
  o.set_maxeval(max_evals);
  o.set_initial_step(std::vector<double>(n, initial_step));
  double f = 0;
  try {
    (void)o.optimize(u0, f);
  } catch (const nlopt::forced_stop&) {
  } catch (const nlopt::roundoff_limited&) {  // as far as the model's precision allows: a result
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    if (!obj.error) return Error{Field::Fit, fmt::format("the optimizer failed: {}", e.what())};
  }
  if (obj.error) return *obj.error;
  return {};
}

/// Evaluations per local search: options.max_evaluations, or 150 per parameter and one.
int max_evaluations(const Model& model) {
  return model.options->max_evaluations > 0 ? model.options->max_evaluations : int(150 * (model.params.size() + 1));
}

}  // namespace

/// Local search k from starts[k] with objective objs[k] (its rows), `initial_step` its first move: the
/// searches in parallel, each evaluation's rows in parallel too (a core a finished search frees helps the
/// others). Each search's best point stays in its objective.
Status run_searches(const Model& model, std::vector<Objective>& objs, const std::vector<std::vector<double>>& starts,
                    double initial_step) {
  std::vector<Status> status(objs.size());
  parallel_for(
      objs.size(), model.jobs,
      [&](std::size_t k) { status[k] = local_search(objs[k], starts[k], max_evaluations(model), initial_step); },
      [&](std::size_t done, std::size_t) {
        model.progress.step = int(done);
        model.progress.report();
      });
  for (auto& st : status)
    if (!st) return st.error();
  return {};
}

/// The fit: from the base values, then from fixed interior points (reproducible runs). The best point
/// seen (the first start's on a tie), in the unit box.
Expected<std::vector<double>> fit_units(const Model& model, const CalibrationOptions& options) {
  std::vector<std::vector<double>> starts;
  std::vector<double> u0;
  for (const auto& q : model.params) u0.push_back(unit_of(q, q.base));
  starts.push_back(u0);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> uni(0.15, 0.85);
  for (int s = 0; s < std::max(0, options.restarts); ++s) {
    std::vector<double> u(model.params.size());
    for (auto& x : u) x = uni(rng);
    starts.push_back(u);
  }
  model.progress.begin(fmt::format("fit from {} starts", starts.size()), int(starts.size()));
  std::vector<Objective> objs(starts.size(),
                              Objective{model, std::vector<char>(model.measured.size(), 1), HUGE_VAL, {}, {}});
  if (auto st = run_searches(model, objs, starts, 0.1); !st) return st.error();
  const Objective* best = &objs.front();
  for (const auto& o : objs)
    if (o.best < best->best) best = &o;
  return best->best_u;
}

}  // namespace charm::calib::detail
