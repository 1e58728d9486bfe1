#include "calibrate/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "calibrate/calibration_model.hpp"
#include "topologies/topology_json.hpp"

namespace charm::calib {

using namespace detail;  // NOLINT(google-build-using-namespace): the entry runs its parts

Expected<Calibration> calibrate(const json& base, const std::string& base_source, const MeasurementSet& data,
                                const std::vector<FixedParameter>& fixed, const CalibrationOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  Calibration c;
  c.base_source = base_source;
  c.fixed = fixed;
  Model model;
  model.base = base;
  model.source = base_source;
  model.jobs = std::max(1, options.jobs);
  model.options = &options;
  model.progress.sink = options.progress;
  // Every documented field is a parameter, spelt out in the file or not (its default is the base).
  if (auto st = topo::complete_document(model.base, base_source); !st) return st.error();
  for (const auto& f : fixed) set_parameter(model.base, f.path, f.value);

  // The parameter list first: a misspelt path fails before any simulation.
  const bool comm_rows =
      std::any_of(data.rows.begin(), data.rows.end(), [](const Measurement& m) { return m.metric == Metric::Comm; });
  auto params = choose_parameters(model, options.fit, fixed, comm_rows, c.notes);
  if (!params) return params.error();
  model.params = std::move(params).value();

  std::vector<double> base_ms;
  if (auto st = build_rows(model, data, options, base_ms); !st) return st.error();
  const std::size_t n = model.rows.size();  // measured runs (the left-out rows, the MAPEs)
  for (const auto& m : data.rows) model.measured.push_back(m.time_ms);
  if (auto st = add_kernels(model, options.kernels, base_ms); !st) return st.error();
  const std::size_t N = model.measured.size();  // runs and kernels: the objective's rows
  for (std::size_t v = 1; v < model.variant_nodes.size(); ++v)
    c.notes.push_back(fmt::format("rows with {} GPUs: {} re-generated with nodes = {}",
                                  model.variant_nodes[v] * base.value("gpus_per_node", 1L), base_source,
                                  model.variant_nodes[v]));
  const std::vector<char> all(N, 1);
  c.pairs = speedup_pairs(data, model.rows);
  if (options.speedup_weight > 0) {
    model.pairs = c.pairs;
    model.pair_scale = std::sqrt(options.speedup_weight);
  }

  if (options.fit.empty())
    if (auto st = drop_unmoved(model, base_ms, c.notes); !st) return st.error();
  c.base_objective = objective_of(model, base_ms, all);

  auto units = fit_units(model, options);
  if (!units) return units.error();
  const std::vector<double> best_u = std::move(units).value();
  const std::vector<double> best = values_of(model.params, best_u);
  auto pred = model.predict(best, all);
  if (!pred) return pred.error();
  c.objective = objective_of(model, *pred, all);

  auto sens = sensitivity_at(model, best, *pred);
  if (!sens) return sens.error();
  c.correlations = estimate_uncertainty(model, *sens, best, best_u, c.objective);

  record_predictions(model, base_ms, *pred, n, options.kernels.source, c);

  if (options.leave_one_out != LeaveOneOut::Off && n > 1)
    if (auto st = leave_one_out(model, *sens, best, best_u, n, options, c); !st) return st.error();

  summarize_errors(data, n, c);
  c.evaluations = model.progress.evaluations.load();
  c.simulations = model.progress.simulations.load();
  c.parameters = model.params;
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  write_document(model, best, data, base_source, n, c);
  return c;
}

}  // namespace charm::calib
