#pragma once
// The parts of `charm calibrate` (calibration.hpp), private to calibrate/: the model being fitted and the
// functions the files below share. Things one file alone uses stay in an anonymous namespace there.
//
//   calibration_model.cpp       the problem: rows placed on their topologies and built, kernels added,
//                               parameters chosen, those no row moves dropped
//   calibration_fit.cpp         the optimiser: the unit box, residuals and objective, local searches, the fit
//   calibration_statistics.cpp  the uncertainty, speedup pairs, predictions, leave-one-out, the MAPEs
//   calibration_report.cpp      the output document and the JSON report (report_json)
//   calibration_nccl.cpp        parameters fixed from nccl-tests logs (fixed_from_nccl_tests)
//   calibration.cpp             the entry (calibrate)

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlopt.hpp>

#include "calibrate/calibration.hpp"
#include "calibrate/normal_equations.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "sim/compute_model.hpp"
#include "sim/evaluate.hpp"
#include "support/parallel_for.hpp"
#include "topologies/topology_json.hpp"

namespace charm::calib::detail {

using nlohmann::json;

/// A measured row made ready to simulate: its plan does not depend on the parameters, so it is built
/// once, with the index the simulator walks; only the topology it runs on changes.
struct Row {
  ir::Plan plan;  // a quotient plan where the schedule's and the topology's structure allow (build_rows)
  std::optional<ir::PlanIndex> index;
  std::size_t variant = 0;  // index into Model::variant_nodes
  int ranks = 0, domains = 0;
  Metric metric = Metric::Time;
  sim::SimOptions charge;  // the run, or one side of it alone (the row's metric); figures only
};

// calibration_model.cpp: one row simulated (Model's predictions run it).
Expected<double> simulate_row(const Row& row, const topo::Topology& t);

/// What is being fitted: the base document, the topology variants the rows need (the base
/// as it is, or re-generated with more nodes), each row's plan, and the parameters.
struct Model {
  json base;
  std::string source;
  std::vector<long> variant_nodes;  // 0: the base as it is; else re-generate with this many nodes
  std::vector<Row> rows;
  std::vector<KernelTime> kernels;  // single-GPU kernel times: predicted after the rows
  std::vector<double> measured;     // ms: every row's, then every kernel's
  std::vector<FitParameter> params;
  std::vector<SpeedupPair> pairs;  // the speedups in the objective (empty: times only)
  double pair_scale = 0;           // sqrt of the speedups' weight
  int jobs = 1;
  const CalibrationOptions* options = nullptr;

  /// Where the fit is: counted by every thread, reported (CalibrationOptions::progress) from the
  /// calling thread only; its stage, step and objective are written by that thread only.
  struct Progress {
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> evaluations{0}, simulations{0};
    std::string stage;
    int step = 0, steps = 0;
    double best = kNaN;
    std::function<void(const FitProgress&)> sink;

    [[nodiscard]] bool on_caller() const { return std::this_thread::get_id() == caller; }
    void begin(std::string name, int count = 0) {
      stage = std::move(name);
      step = 0;
      steps = count;
      best = kNaN;
      report();
    }
    void report() const {
      if (sink && on_caller()) sink({stage, evaluations.load(), simulations.load(), best, step, steps});
    }
  };
  mutable Progress progress;

  [[nodiscard]] json document(const std::vector<double>& values) const {
    json d = base;
    for (std::size_t k = 0; k < params.size(); ++k)
      if (!is_measurement_parameter(params[k].path)) set_parameter(d, params[k].path, values[k]);
    return d;
  }

  /// What the rows of metric m hold beyond the simulated figure (ms): the fitted measurement offset.
  [[nodiscard]] double offset_ms(const std::vector<double>& values, Metric m) const {
    if (m != Metric::Comm) return 0;
    for (std::size_t k = 0; k < params.size(); ++k)
      if (params[k].path == kCommOffsetParameter) return values[k];
    return 0;
  }

  [[nodiscard]] Expected<std::vector<topo::Topology>> topologies(const json& doc) const {
    std::vector<topo::Topology> out;
    for (long nodes : variant_nodes) {
      json d = doc;
      if (nodes > 0) d["nodes"] = nodes;
      auto t = topo::parse_topology(d, source);
      if (!t) return t.error();
      out.push_back(std::move(t).value());
    }
    return out;
  }

  /// Kernel k's time (ms) on topology t: the kernel model alone, as a single-GPU benchmark times it.
  [[nodiscard]] static double kernel_ms(const KernelTime& k, const topo::Topology& t) {
    const auto model = sim::ComputeModel::from_topology(t, k.workload.dtype);
    const auto phase = k.workload.pass == ir::PassKind::Bwd ? ir::Phase::Bwd : ir::Phase::Fwd;
    const sim::BlockShape shape{double(k.q_tokens), double(k.kv_tokens), k.causal};
    return model.kernel_seconds(shape, phase, k.workload) * 1e3;
  }

  /// Predicted times (ms) at each point (parameter values): the rows, then the kernels, that `uses`
  /// marks (one mask for every point, or one per point); NaN for the others. Every (point, row)
  /// simulation is a task of one parallel_for: the figures do not depend on the job count.
  [[nodiscard]] Expected<std::vector<std::vector<double>>>
  predict_at(const std::vector<std::vector<double>>& points, const std::vector<std::vector<char>>& uses) const {
    auto use_of = [&](std::size_t p) -> const std::vector<char>& { return uses.size() == 1 ? uses[0] : uses[p]; };
    std::vector<std::vector<topo::Topology>> topos;
    std::vector<std::pair<std::size_t, std::size_t>> tasks;  // (point, row)
    std::vector<std::vector<double>> out(points.size(), std::vector<double>(rows.size() + kernels.size(), kNaN));
    for (std::size_t p = 0; p < points.size(); ++p) {
      auto t = topologies(document(points[p]));
      if (!t) return t.error();
      topos.push_back(std::move(t).value());
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (use_of(p)[i]) tasks.emplace_back(p, i);
      for (std::size_t k = 0; k < kernels.size(); ++k)
        if (use_of(p)[rows.size() + k]) out[p][rows.size() + k] = kernel_ms(kernels[k], topos[p].front());
    }
    // The longest simulations first (a plan's ops stand for its time), so that no thread is left
    // with a long one when the others are done.
    std::stable_sort(tasks.begin(), tasks.end(), [&](const auto& x, const auto& y) {
      return rows[x.second].plan.size() > rows[y.second].plan.size();
    });
    // A failed simulation's error, kept in its task's slot: the first in task order is the one returned.
    std::vector<std::optional<Error>> errors(tasks.size());
    parallel_for(
        tasks.size(), jobs,
        [&](std::size_t k) {
          const auto [p, i] = tasks[k];
          auto v = simulate_row(rows[i], topos[p][rows[i].variant]);
          ++progress.simulations;
          if (v)
            out[p][i] = *v + offset_ms(points[p], rows[i].metric);
          else
            errors[k] = v.error();
        },
        [&](std::size_t, std::size_t) { progress.report(); });
    progress.evaluations += int(points.size());
    for (auto& e : errors)
      if (e) return *e;
    return out;
  }

  [[nodiscard]] Expected<std::vector<double>> predict(const std::vector<double>& values,
                                                      const std::vector<char>& use) const {
    auto p = predict_at({values}, {use});
    if (!p) return p.error();
    return std::move(p->front());
  }
};

// calibration_model.cpp: the problem built.
Status build_rows(Model& model, const MeasurementSet& data, const CalibrationOptions& options,
                  std::vector<double>& base_ms);
Status add_kernels(Model& model, const KernelTimeSet& kernels, std::vector<double>& base_ms);
Expected<std::vector<FitParameter>> choose_parameters(Model& model, const std::vector<std::string>& requested,
                                                      const std::vector<FixedParameter>& fixed, bool comm_rows,
                                                      std::vector<std::string>& notes);
Status drop_unmoved(Model& model, const std::vector<double>& base_ms, std::vector<std::string>& notes);

// calibration_fit.cpp: the optimiser (the unit box the parameters move in, the residuals, the objective).
double value_of(const FitParameter& p, double u);
double unit_of(const FitParameter& p, double x);
std::vector<double> values_of(const std::vector<FitParameter>& ps, const std::vector<double>& u);
std::vector<double> residuals(const Model& model, const std::vector<double>& predicted, const std::vector<char>& use);
double objective_of(const Model& model, const std::vector<double>& predicted, const std::vector<char>& use);
std::vector<std::pair<std::size_t, std::size_t>> residual_rows(const Model& model);

/// The objective NLopt calls: keeps the best point, reports progress, and stops the optimizer on a
/// simulation error (kept to be returned, not swallowed).
struct Objective {
  const Model& model;
  std::vector<char> use;
  double best = HUGE_VAL;
  std::vector<double> best_u;
  std::optional<Error> error;

  double operator()(const std::vector<double>& u) {
    auto p = model.predict(values_of(model.params, u), use);
    if (!p) {
      error = p.error();
      throw nlopt::forced_stop();
    }
    const double f = objective_of(model, *p, use);
    if (f < best) {
      best = f;
      best_u = u;
    }
    if (model.progress.on_caller()) {
      model.progress.best = best;
      model.progress.report();
    }
    return f;
  }
  static double call(unsigned n, const double* x, double* grad, void* self) {
    (void)grad;  // derivative-free
    return (*static_cast<Objective*>(self))(std::vector<double>(x, x + n));
  }
};

Status run_searches(const Model& model, std::vector<Objective>& objs, const std::vector<std::vector<double>>& starts,
                    double initial_step);
Expected<std::vector<double>> fit_units(const Model& model, const CalibrationOptions& options);

// calibration_statistics.cpp: the statistics.

/// The residuals' Jacobian at the fit, d(residual)/d(theta) with theta = log(value) (log scale) or
/// value (linear), by central differences: the uncertainty's and the one-step leave-one-out's.
struct Sensitivity {
  Matrix J;
  std::vector<double> r;    // the residuals at the fit
  std::vector<char> moves;  // per parameter: some residual depends on it
};

Expected<Sensitivity> sensitivity_at(const Model& model, const std::vector<double>& best,
                                     const std::vector<double>& predicted);
std::vector<Correlation> estimate_uncertainty(Model& model, const Sensitivity& s, const std::vector<double>& best,
                                              const std::vector<double>& best_u, double objective);
std::vector<SpeedupPair> speedup_pairs(const MeasurementSet& data, const std::vector<Row>& rows);
void record_predictions(const Model& model, const std::vector<double>& base_ms, const std::vector<double>& pred,
                        std::size_t n, const std::string& kernel_source, Calibration& c);
Status leave_one_out(const Model& model, const Sensitivity& s, const std::vector<double>& best,
                     const std::vector<double>& best_u, std::size_t n, const CalibrationOptions& options,
                     Calibration& c);
void summarize_errors(const MeasurementSet& data, std::size_t n, Calibration& c);

// calibration_report.cpp: the output document.
void write_document(const Model& model, const std::vector<double>& best, const MeasurementSet& data,
                    const std::string& base_source, std::size_t n, Calibration& c);

}  // namespace charm::calib::detail
