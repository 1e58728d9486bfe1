#pragma once
// `charm calibrate`: fits a small declared set of topology parameters to measured run times.
//
// Every objective evaluation writes the candidate values into the base topology document,
// parses it again (topo::parse_topology) and simulates every measured row on it
// (sim::simulate, the engine `charm simulate` runs), so the fit sees exactly the model the
// other commands use. A row's plan does not depend on the parameters: it is built once, with
// its index, as a quotient plan where its symmetry and the topology's allow (every figure is
// the full plan's). Objective: sum over rows of log(predicted / measured)^2. Parameters move in
// a unit box (log space for positive ones, linear for those whose range starts at 0) under
// NLopt's bounded derivative-free BOBYQA, from the base values and a few fixed interior
// starting points. Uncertainty: Gauss-Newton, sigma^2 (J^T J)^-1 with J the log-residual
// Jacobian at the optimum, over the parameters some row moves. Leave-one-out: one
// Gauss-Newton step from the optimum without the row (the influence approximation), the rows
// it moves most refitted exactly to check it; or every row refitted (LeaveOneOut::Exact).
// Parallel (parallel_for) over the starts and the refits, else over the rows of one
// evaluation; every figure lands in its own slot, so the job count never changes a result.
//
// Rows may use fewer GPUs than the base topology (the first `ranks` GPUs, domains = those
// they span) or more: a generator-form base is then re-generated with
// nodes = ranks / gpus_per_node, with the same parameters.

#include <nlohmann/json.hpp>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "calibrate/kernel_times.hpp"
#include "calibrate/measurements.hpp"
#include "calibrate/nccl_tests.hpp"
#include "calibrate/parameters.hpp"
#include "scheduler/planners/planners.hpp"
#include "support/enum_names.hpp"
#include "support/expected.hpp"

namespace charm::calib {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A value set from a measurement outside the fit (an nccl-tests log), not fitted.
struct FixedParameter {
  std::string path;
  double value = 0, base = 0;
  std::string source;     // the log file
  nlohmann::json detail;  // the alpha-beta fit behind the value
};

/// The link classes an nccl-tests log can describe (generator form): intra, numa, inter.
enum class LinkClass { Intra, Numa, Inter };
inline constexpr EnumName<LinkClass> kLinkClassNames[] = {
    {"intra", LinkClass::Intra}, {"numa", LinkClass::Numa}, {"inter", LinkClass::Inter}};
[[nodiscard]] inline bool is_link_class(const std::string& cls) { return parse_enum(cls, kLinkClassNames).has_value(); }

/// Bandwidth (the busbw plateau) and per-link latency of link class `cls` from its log.
/// The latency is the fitted start-up time less the route's other links, divided by the
/// number of `cls` links a message crosses (two: GPU -> switch -> GPU), so that the
/// simulated route latency equals the measured one. Errors name `where` (the flag).
[[nodiscard]] Expected<std::vector<FixedParameter>> fixed_from_nccl_tests(const nlohmann::json& base,
                                                                          const std::string& base_source,
                                                                          const std::string& cls, const NcclLog& log);

struct FitParameter {
  std::string path;
  double base = 0;  // the value in the base document
  Bounds bounds;
  double value = 0;     // fitted
  double sigma = kNaN;  // 1-sigma in the field's units (Gauss-Newton); NaN: not estimated
  double relative_sigma = kNaN;
  bool at_bound = false;
  std::string note;
};

struct RowPrediction {
  int ranks = 0, domains = 0;  // as simulated
  double base_ms = 0;          // the base document
  double predicted_ms = 0;     // the fitted parameters
  double loo_ms = kNaN;        // fitted without this row
};

/// A row and the ring row of the same workload and GPUs: speedup = ring time / this time.
struct SpeedupPair {
  std::size_t ring = 0, other = 0;
};

/// Two fitted parameters whose estimates correlate strongly (|r| > 0.9): the rows identify their
/// combination rather than each.
struct Correlation {
  std::string a, b;
  double r = 0;
};

/// A row whose one-step leave-one-out prediction was checked against an exact refit without it.
struct LooCheck {
  std::size_t row = 0;
  double one_step_ms = 0, exact_ms = 0;
};

struct Mape {
  double base = kNaN, in_sample = kNaN, loo = kNaN;  // percent
};

struct FitProgress {
  std::string stage;        // "fit from 4 starts", "uncertainty", "leave-one-out, one step each"
  int evaluations = 0;      // parameter points evaluated, every stage so far
  int simulations = 0;      // row simulations, every stage so far
  double best = kNaN;       // the stage's objective
  int step = 0, steps = 0;  // the stage's tasks done of its count (starts, refits); 0 of 0: none counted
};

/// How each row's leave-one-out prediction is made.
enum class LeaveOneOut {
  Off,
  OneStep,  // one Gauss-Newton step from the full fit without the row (influence), a few rows refitted to check
  Exact,    // a least-squares refit without the row, started from the full fit
};

struct CalibrationOptions {
  std::vector<std::string> fit;  // parameter paths; empty: default_fit_parameters() present in the base
  int restarts = 3;              // starts besides the base values
  int jobs = 1;                  // threads: over starts and refits, else over rows (the results do not depend on it)
  LeaveOneOut leave_one_out = LeaveOneOut::OneStep;
  int loo_checks = 3;                                // OneStep: rows also refitted exactly, the most influential
  int max_evaluations = 0;                           // per local search; 0: 150 x (parameters + 1)
  std::function<void(const FitProgress&)> progress;  // called on the calling thread, often: throttle it
  /// Rows are refused before they are planned when their plan (held for the fit, with every row planned
  /// before it) and its simulation would need more (sched::estimate_plan; the default: no limit). The error
  /// names the row's file:line and the budget.
  sched::MemoryBudget memory_budget;
  KernelTimeSet kernels;  // single-GPU kernel times fitted with the runs (calibrate --kernels)
  /// Weight of the speedups in the objective: each pair of a ring run and another algorithm's run
  /// of one workload adds weight x log(predicted speedup / measured speedup)^2 to the rows' terms
  /// (0: times only). The runs of one workload share that configuration's conditions; the speedup
  /// is what tells the algorithms apart, and what a user chooses by.
  double speedup_weight = 1;
};

/// A kernel time as predicted by the base and by the fit (ms).
struct KernelPrediction {
  KernelTime kernel;  // the measured row
  double base_ms = 0, predicted_ms = 0;
};

struct Calibration {
  std::string base_source;
  nlohmann::json document;  // the base with fixed and fitted values written in, and the calibration block
  std::vector<FitParameter> parameters;
  std::vector<FixedParameter> fixed;
  std::vector<RowPrediction> rows;  // one per measurement, in file order
  std::vector<SpeedupPair> pairs;
  double base_objective = 0, objective = 0;
  int evaluations = 0;  // parameter points, each simulating its rows
  int simulations = 0;  // row simulations
  LeaveOneOut loo = LeaveOneOut::Off;
  std::vector<LooCheck> loo_checks;
  std::vector<Correlation> correlations;  // |r| > 0.9, from the covariance of the identified parameters
  Mape time, speedup;
  Mape component;                             // rows of the comm / compute metric
  std::vector<KernelPrediction> kernel_rows;  // one per kernel time (options.kernels), in file order
  Mape kernels;                               // over them (no leave-one-out: they stay in every refit)
  std::string kernel_source;                  // their file
  std::size_t time_rows = 0;                  // rows of the time metric (the time MAPE's)
  std::vector<std::string> notes;
  double seconds = 0;
};

/// Fits; errors in a row name its file, line and column; errors in a parameter name its path.
[[nodiscard]] Expected<Calibration> calibrate(const nlohmann::json& base, const std::string& base_source,
                                              const MeasurementSet& data, const std::vector<FixedParameter>& fixed,
                                              const CalibrationOptions& options);

/// The report `charm calibrate --json` prints: rows, parameters, speedups, MAPEs.
[[nodiscard]] nlohmann::json report_json(const Calibration& c, const MeasurementSet& data);

}  // namespace charm::calib
