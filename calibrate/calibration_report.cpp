// What `charm calibrate` writes: the calibrated topology document and the JSON report.

#include "calibrate/calibration_model.hpp"

#include <fmt/format.h>

#include <cmath>

#include "scheduler/ir/plan_io.hpp"

namespace charm::calib {

namespace detail {

/// The output document: the base with every value written in, and where they came from.
void write_document(const Model& model, const std::vector<double>& best, const MeasurementSet& data,
                    const std::string& base_source, std::size_t n, Calibration& c) {
  c.document = model.document(best);
  if (c.document.contains("name") && c.document["name"].is_string())
    c.document["name"] = c.document["name"].get<std::string>() + "-calibrated";
  {
    // The base's notes describe its own values; say which ones are no longer those.
    std::string what;
    for (const auto& q : c.parameters) what += fmt::format("{}{}", what.empty() ? "" : ", ", q.path);
    for (const auto& f : c.fixed) what += fmt::format("{}{} (nccl-tests)", what.empty() ? "" : ", ", f.path);
    json notes = json::array();
    if (c.document.contains("notes"))
      notes = c.document["notes"].is_array() ? c.document["notes"] : json::array({c.document["notes"]});
    notes.push_back(
        fmt::format("charm calibrate set {} from {} ({} rows); see \"calibration\".", what, data.source, n));
    c.document["notes"] = notes;
  }
  auto num = [](double x) { return std::isnan(x) ? json(nullptr) : json(x); };
  json fitted = json::array();
  for (const auto& q : c.parameters) {
    json j = {{"path", q.path},
              {"value", q.value},
              {"base", q.base},
              {"bounds", {q.bounds.lo, q.bounds.hi}},
              {"scale", q.bounds.scale == Scale::Log ? "log" : "linear"},
              {"bounds_rule", q.bounds.rule},
              {"sigma", num(q.sigma)},
              {"relative_sigma", num(q.relative_sigma)}};
    if (!q.note.empty()) j["note"] = q.note;
    fitted.push_back(j);
  }
  json fixed_j = json::array();
  for (const auto& f : c.fixed)
    fixed_j.push_back(
        {{"path", f.path}, {"value", f.value}, {"base", num(f.base)}, {"source", f.source}, {"nccl_tests", f.detail}});
  c.document["calibration"] = {
      {"tool", "charm calibrate"},
      {"base", base_source},
      {"measurements", {{"file", data.source}, {"rows", n}}},
      {"objective", model.pairs.empty()
                        ? std::string("sum over rows of log(predicted / measured)^2")
                        : fmt::format("sum over rows of log(predicted / measured)^2 + {:g} x sum over pairs of a ring "
                                      "run and another run of one workload of log(predicted / measured speedup)^2",
                                      model.pair_scale * model.pair_scale)},
      {"objective_value", {{"base", c.base_objective}, {"fitted", c.objective}}},
      {"fitted", fitted},
      {"fixed", fixed_j},
      {"mape_percent",
       {{"time",
         {{"base", num(c.time.base)},
          {"in_sample", num(c.time.in_sample)},
          {"leave_one_out", num(c.time.loo)},
          {"rows", c.time_rows}}},
        {"components",
         {{"base", num(c.component.base)},
          {"in_sample", num(c.component.in_sample)},
          {"leave_one_out", num(c.component.loo)},
          {"rows", n - c.time_rows}}},
        {"kernels",
         {{"base", num(c.kernels.base)}, {"in_sample", num(c.kernels.in_sample)}, {"rows", c.kernel_rows.size()}}},
        {"speedup",
         {{"base", num(c.speedup.base)},
          {"in_sample", num(c.speedup.in_sample)},
          {"leave_one_out", num(c.speedup.loo)},
          {"pairs", c.pairs.size()}}}}},
      {"notes", c.notes}};
}

}  // namespace detail

using nlohmann::json;

json report_json(const Calibration& c, const MeasurementSet& data) {
  auto num = [](double x) { return std::isnan(x) ? json(nullptr) : json(x); };
  json rows = json::array();
  for (std::size_t i = 0; i < data.rows.size(); ++i) {
    const auto& m = data.rows[i];
    const auto& r = c.rows[i];
    const auto& w = m.workload;
    json row = ir::workload_to_json(w);  // keys sorted: the same object as one written out
    row.update(json{{"file", data.files[std::size_t(m.file)]},
                    {"line", m.line},
                    {"metric", to_string(m.metric)},
                    {"algo", m.algo},
                    {"ranks", r.ranks},
                    {"domains", r.domains},
                    {"measured_ms", m.time_ms},
                    {"base_ms", r.base_ms},
                    {"predicted_ms", r.predicted_ms},
                    {"error", r.predicted_ms / m.time_ms - 1},
                    {"loo_predicted_ms", num(r.loo_ms)},
                    {"loo_error", num(r.loo_ms / m.time_ms - 1)}});
    rows.push_back(std::move(row));
  }
  json kernels = json::array();
  for (const auto& k : c.kernel_rows) {
    json row = ir::workload_to_json(k.kernel.workload);
    row.erase("seq");
    row.erase("layout");
    row.erase("causal");
    row.update(json{{"file", c.kernel_source},
                    {"line", k.kernel.line},
                    {"q_tokens", k.kernel.q_tokens},
                    {"kv_tokens", k.kernel.kv_tokens},
                    {"mask", k.kernel.causal ? "causal" : "full"},
                    {"measured_ms", k.kernel.time_ms},
                    {"base_ms", k.base_ms},
                    {"predicted_ms", k.predicted_ms},
                    {"error", k.predicted_ms / k.kernel.time_ms - 1}});
    kernels.push_back(std::move(row));
  }
  json pairs = json::array();
  for (const auto& pr : c.pairs) {
    const auto &r = c.rows[pr.ring], &o = c.rows[pr.other];
    const double measured = data.rows[pr.ring].time_ms / data.rows[pr.other].time_ms;
    pairs.push_back({{"ring_line", data.rows[pr.ring].line},
                     {"line", data.rows[pr.other].line},
                     {"algo", data.rows[pr.other].algo},
                     {"measured", measured},
                     {"base", r.base_ms / o.base_ms},
                     {"predicted", r.predicted_ms / o.predicted_ms},
                     {"loo_predicted", num(r.loo_ms / o.loo_ms)}});
  }
  const json& cal = c.document["calibration"];
  json checks = json::array();
  for (const auto& k : c.loo_checks)
    checks.push_back({{"line", data.rows[k.row].line}, {"one_step_ms", k.one_step_ms}, {"exact_ms", k.exact_ms}});
  json correlations = json::array();
  for (const auto& r : c.correlations) correlations.push_back({{"a", r.a}, {"b", r.b}, {"r", r.r}});
  const char* method = c.loo == LeaveOneOut::OneStep ? "one-step" : c.loo == LeaveOneOut::Exact ? "exact" : "off";
  return {{"schema", 1},
          {"topology", c.base_source},
          {"measurements", data.source},
          {"rows", rows},
          {"speedups", pairs},
          {"kernels", kernels},
          {"parameters", cal["fitted"]},
          {"fixed", cal["fixed"]},
          {"mape_percent", cal["mape_percent"]},
          {"objective", cal["objective_value"]},
          {"leave_one_out", {{"method", method}, {"checks", checks}}},
          {"correlations", correlations},
          {"evaluations", c.evaluations},
          {"simulations", c.simulations},
          {"seconds", c.seconds},
          {"notes", c.notes}};
}

}  // namespace charm::calib
