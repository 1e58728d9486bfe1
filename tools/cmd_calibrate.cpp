// charm calibrate — fit topology parameters to measured run times (calibrate/calibration.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <thread>
#include <unistd.h>

#include "tools/cli_common.hpp"

#if CHARM_CLI_HAVE_CALIBRATE
#include "calibrate/calibration.hpp"
#include "tools/cluster_flags.hpp"
#include "topologies/topology_json.hpp"
#endif

namespace charm::cli {
namespace {

#if CHARM_CLI_HAVE_CALIBRATE

using nlohmann::json;

/// The fit's progress line: its stage, objective, evaluations and simulations, with an estimate of the
/// stage's end where it counts steps (starts, refits).
auto fit_progress(ProgressLine& line) {
  struct Stage {
    std::string name;
    double since = 0;
  };
  auto stage = std::make_shared<Stage>();
  return [&line, stage](const calib::FitProgress& p) {
    if (p.stage != stage->name) *stage = {p.stage, line.elapsed()};
    line.update([&] {
      std::string where = p.stage;
      if (p.steps > 0) where += fmt::format(", {} of {} done", p.step, p.steps);
      std::string eta;
      if (p.steps > 0 && p.step > 0 && p.step < p.steps)
        eta = fmt::format(", about {:.0f} s left in it", (line.elapsed() - stage->since) / p.step * (p.steps - p.step));
      return fmt::format("charm calibrate: {}: objective {:.6g}, {} evaluations, {} simulations, {:.0f} s{}", where,
                         p.best, p.evaluations, p.simulations, line.elapsed(), eta);
    });
  };
}

/// How the leave-one-out predictions were made, and what checks them.
std::string loo_text(const calib::Calibration& c, const calib::MeasurementSet& data) {
  switch (c.loo) {
  case calib::LeaveOneOut::Off:
    return "# leave-one-out: not computed (--loo off)\n";
  case calib::LeaveOneOut::Exact:
    return "# leave-one-out: exact, a least-squares refit without each row from the full fit (--loo exact)\n";
  case calib::LeaveOneOut::OneStep:
    break;
  }
  std::string checks;
  double worst = 0;
  for (const auto& k : c.loo_checks) {
    checks += fmt::format("{}line {} {:.3f} against {:.3f} ms", checks.empty() ? "" : "; ", data.rows[k.row].line,
                          k.one_step_ms, k.exact_ms);
    worst = std::max(worst, std::abs(k.one_step_ms / k.exact_ms - 1));
  }
  std::string out =
      "# leave-one-out: one Gauss-Newton step from the full fit without each row (the influence approximation; "
      "--loo exact refits every row)\n";
  if (!c.loo_checks.empty())
    out += fmt::format("# checked by exact refits of the {} rows it moves most: {} (largest difference {:.2f}%)\n",
                       c.loo_checks.size(), checks, worst * 100);
  return out;
}

std::string pct(double x) { return std::isnan(x) ? "-" : fmt::format("{:.1f}%", x); }
/// Relative 1-sigma, or the absolute one where the value is 0 (a linear parameter at its lower bound).
std::string sigma_text(const calib::FitParameter& p) {
  if (!std::isnan(p.relative_sigma)) return pct(p.relative_sigma * 100);
  return std::isnan(p.sigma) ? "-" : fmt::format("+-{:.3g}", p.sigma);
}
std::string signed_pct(double ratio) { return std::isnan(ratio) ? "-" : fmt::format("{:+.1f}%", (ratio - 1) * 100); }

void print_text(const calib::Calibration& c, const calib::MeasurementSet& data, const std::string& out) {
  std::cout << fmt::format(
      "# charm calibrate: {} to {}: {} rows, {} parameters fitted, {} fixed, {} evaluations ({} simulations), {:.1f} "
      "s\n",
      c.base_source, data.source, data.rows.size(), c.parameters.size(), c.fixed.size(), c.evaluations, c.simulations,
      c.seconds);
  std::cout << fmt::format("# {:<26} {:>12} {:>12} {:>24} {:>8}  {}\n", "parameter", "base", "fitted", "bounds",
                           "1-sigma", "");
  for (const auto& p : c.parameters)
    std::cout << fmt::format("  {:<26} {:>12.6g} {:>12.6g} {:>24} {:>8}  {}\n", p.path, p.base, p.value,
                             fmt::format("[{:.4g}, {:.4g}]", p.bounds.lo, p.bounds.hi), sigma_text(p), p.note);
  for (const auto& f : c.fixed)
    std::cout << fmt::format("  {:<26} {:>12.6g} {:>12.6g} {:>24} {:>8}  fixed from nccl-tests {}\n", f.path, f.base,
                             f.value, "-", "-", f.source);
  for (const auto& r : c.correlations)
    std::cout << fmt::format("# correlated: {} and {} (r = {:+.2f}): the rows tell their combination, not each\n", r.a,
                             r.b, r.r);
  std::cout << fmt::format("# {:>5} {:<12} {:>4} {:>5} {:>5} {:>8} {:>10} {:>10} {:>10} {:>8} {:>10} {:>8}\n", "line",
                           "algo", "pass", "ranks", "B", "S", "measured", "base", "fitted", "err", "LOO", "err");
  std::cout << fmt::format("# {:>5} {:<12} {:>4} {:>5} {:>5} {:>8} {:>10} {:>10} {:>10} {:>8} {:>10} {:>8}\n", "", "",
                           "", "", "", "", "(ms)", "(ms)", "(ms)", "", "(ms)", "");
  for (std::size_t i = 0; i < data.rows.size(); ++i) {
    const auto& m = data.rows[i];
    const auto& r = c.rows[i];
    std::cout << fmt::format(
        "  {:>5} {:<12} {:>4} {:>5} {:>5} {:>8} {:>10.3f} {:>10.3f} {:>10.3f} {:>8} {:>10} {:>8}\n", m.line,
        m.metric == calib::Metric::Time ? m.algo : fmt::format("{}:{}", m.algo, calib::to_string(m.metric)),
        to_string(m.workload.pass), r.ranks, m.workload.batch, m.workload.seq, m.time_ms, r.base_ms, r.predicted_ms,
        signed_pct(r.predicted_ms / m.time_ms), std::isnan(r.loo_ms) ? "-" : fmt::format("{:.3f}", r.loo_ms),
        signed_pct(r.loo_ms / m.time_ms));
  }
  if (!c.kernel_rows.empty()) {
    std::cout << fmt::format("# {:>5} {:<12} {:>4} {:>5} {:>5} {:>8} {:>8} {:>10} {:>10} {:>10} {:>8}\n", "line",
                             "kernel", "pass", "B", "H", "q", "kv", "measured", "base", "fitted", "err");
    for (const auto& k : c.kernel_rows) {
      const auto& w = k.kernel.workload;
      std::cout << fmt::format("  {:>5} {:<12} {:>4} {:>5} {:>5} {:>8} {:>8} {:>10.4f} {:>10.4f} {:>10.4f} {:>8}\n",
                               k.kernel.line, k.kernel.causal ? "causal" : "full", to_string(w.pass), w.batch, w.heads,
                               k.kernel.q_tokens, k.kernel.kv_tokens, k.kernel.time_ms, k.base_ms, k.predicted_ms,
                               signed_pct(k.predicted_ms / k.kernel.time_ms));
    }
    std::cout << fmt::format("# kernel times MAPE {} fitted (base {}; {} kernels from {})\n", pct(c.kernels.in_sample),
                             pct(c.kernels.base), c.kernel_rows.size(), c.kernel_source);
  }
  for (const auto& n : c.notes) std::cout << "# note: " << n << "\n";
  std::cout << loo_text(c, data);
  if (c.time_rows < data.rows.size())
    std::cout << fmt::format("# comm/compute rows MAPE {} in-sample, {} leave-one-out (base {}; {} rows)\n",
                             pct(c.component.in_sample), pct(c.component.loo), pct(c.component.base),
                             data.rows.size() - c.time_rows);
  std::cout << fmt::format("# time MAPE {} in-sample, {} leave-one-out (base {}; {} rows); speedup over ring MAPE {} "
                           "in-sample, {} leave-one-out (base {}; {} "
                           "pairs); wrote {}\n",
                           pct(c.time.in_sample), pct(c.time.loo), pct(c.time.base), c.time_rows,
                           pct(c.speedup.in_sample), pct(c.speedup.loo), pct(c.speedup.base), c.pairs.size(), out);
}

/// --nccl-tests CLASS=LOG,...: each link class's bandwidth and latency fixed from its log.
std::vector<calib::FixedParameter> nccl_fixed(const std::string& nccl, const json& base, const std::string& topology) {
  std::vector<calib::FixedParameter> fixed;
  for (const auto& item : split_list(nccl)) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      fail(Error{"--nccl-tests", fmt::format("expected CLASS=LOG (CLASS intra, numa or inter), got '{}'", item)});
    const std::string cls = item.substr(0, eq);
    if (!calib::is_link_class(cls))
      fail(Error{"--nccl-tests", fmt::format("unknown link class '{}' (expected intra, numa or inter)", cls)});
    for (const auto& f : fixed)
      if (f.path.rfind(cls + ".", 0) == 0)
        fail(Error{"--nccl-tests", fmt::format("link class '{}' is given twice", cls)});
    const auto log = unwrap(calib::load_nccl_tests(item.substr(eq + 1)));
    for (auto& f : unwrap(calib::fixed_from_nccl_tests(base, topology, cls, log))) fixed.push_back(std::move(f));
  }
  return fixed;
}

struct CalibrateOpts {
  std::string topology, measurements, kernels, nccl, fit, out;
  std::string loo = "one-step";
  bool json_out = false, no_loo = false, progress = false;
  int jobs = 0, restarts = 3;  // jobs omitted: every core
  double speedup_weight = 1;
  std::string max_memory;
};

/// Every file the command reads, checked so that -o can never replace one of them.
void check_calibrate_files(const CalibrateOpts& o) {
  if (o.measurements.empty() && o.kernels.empty())
    fail(Error{"--measurements", "give measured runs (--measurements), kernel timings (--kernels), or both"});
  FlagPaths inputs{{"--topology", o.topology}};
  if (!o.measurements.empty()) inputs.emplace_back("--measurements", o.measurements);
  if (!o.kernels.empty()) inputs.emplace_back("--kernels", o.kernels);
  for (const auto& item : split_list(o.nccl)) inputs.emplace_back("--nccl-tests", item.substr(item.find('=') + 1));
  check_command_files({inputs, {{"--out", o.out}}, {}});
}

/// The fit's options from the flags (the files aside), each checked where it is read.
calib::CalibrationOptions calibration_options(const CalibrateOpts& o, bool jobs_given) {
  calib::CalibrationOptions opt;
  // Omitted: every core. Given, it is a count (no value stands for "every core").
  opt.jobs = jobs_given ? o.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (opt.jobs < 1 || opt.jobs > 1024) fail(Error{"--jobs", fmt::format("must be in [1, 1024], got {}", o.jobs)});
  if (o.restarts < 0 || o.restarts > 100)
    fail(Error{"--restarts", fmt::format("must be in [0, 100], got {}", o.restarts)});
  opt.restarts = o.restarts;
  static constexpr EnumName<calib::LeaveOneOut> kLoo[] = {{"one-step", calib::LeaveOneOut::OneStep},
                                                          {"exact", calib::LeaveOneOut::Exact},
                                                          {"off", calib::LeaveOneOut::Off}};
  const auto loo = parse_enum(o.loo, kLoo);
  if (!loo) fail(Error{"--loo", fmt::format("expected {}, got '{}'", enum_names_text(kLoo), o.loo)});
  opt.leave_one_out = o.no_loo ? calib::LeaveOneOut::Off : *loo;
  if (!(o.speedup_weight >= 0 && o.speedup_weight <= 100))
    fail(Error{"--speedup-weight", fmt::format("must be in [0, 100], got {}", o.speedup_weight)});
  opt.speedup_weight = o.speedup_weight;
  opt.fit = split_list(o.fit);
  return opt;
}

void register_calibrate(CLI::App& app) {
  using Opts = CalibrateOpts;
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("calibrate",
                                 "fit topology parameters (bandwidths, efficiencies, overheads) to measured run times");
  sub->add_option("--topology,-t", o->topology, "base topology JSON file")->required();
  sub->add_option("--measurements,-m", o->measurements,
                  "measured runs, CSV, one file or several comma-separated (see README: "
                  "algo,pass,batch,seq,...,time_ms[,ranks,domains,metric]); optional with --kernels");
  sub->add_option("--kernels", o->kernels,
                  "single-GPU attention kernel times, CSV (pass,batch,heads,kv_heads,head_dim,dtype,q_tokens,kv_tokens,"
                  "mask,time_ms; charm bench-kernels writes one), fitted with the runs or, alone, the kernel layer");
  sub->add_option("--nccl-tests", o->nccl,
                  "CLASS=LOG,...: nccl-tests logs that fix a link class's bandwidth and latency (intra, numa, inter)");
  sub->add_option("--fit", o->fit,
                  "comma-separated parameter paths in the topology JSON, spelt out in the file or not (default: "
                  "every link rate, kernel efficiency and stack cost the rows move)");
  sub->add_option("--out,-o", o->out, "calibrated topology JSON to write")->required();
  sub->add_flag("--json", o->json_out, "print the report as JSON");
  sub->add_option("--jobs,-j", o->jobs,
                  "threads: the starts and refits, else the rows, in parallel (default: all cores; the report is the "
                  "same for any count)");
  sub->add_option("--restarts", o->restarts, "optimizer starts besides the base values")->capture_default_str();
  sub->add_option("--loo", o->loo,
                  "leave-one-out predictions: one-step (a Gauss-Newton step from the full fit per row, the rows it "
                  "moves most refitted to check it), exact (a refit per row) or off")
      ->capture_default_str();
  sub->add_flag("--no-loo", o->no_loo, "the same as --loo off");
  sub->add_flag("--progress", o->progress,
                "draw the progress line even with --json or when standard error is not a terminal");
  sub->add_option("--speedup-weight", o->speedup_weight,
                  "weight of the speedups over ring in the objective beside the times (each measured pair of a ring "
                  "run and another run of one workload; 0: times only)")
      ->capture_default_str();
  add_max_memory(*sub, o->max_memory);
  sub->callback([o, sub] {
    check_calibrate_files(*o);
    calib::CalibrationOptions opt = calibration_options(*o, sub->count("--jobs") > 0);
    // The topology is checked by its loader first (its errors name the JSON path), then kept as a document to edit.
    (void)load_topology_file(o->topology);
    const json base = json::parse(unwrap(calib::read_text_file(o->topology, "a topology file")));
    // Kernel timings alone fit the kernel layer: no run to simulate.
    const auto data =
        o->measurements.empty() ? calib::MeasurementSet{} : unwrap(calib::load_measurements(o->measurements));
    for (const auto& w : data.warnings) print_warning(w);
    const std::vector<calib::FixedParameter> fixed = nccl_fixed(o->nccl, base, o->topology);
    if (!o->kernels.empty()) {
      opt.kernels = unwrap(calib::load_kernel_times(o->kernels));
      for (const auto& w : opt.kernels.warnings) print_warning(w);
    }
    opt.memory_budget = memory_budget(o->max_memory);
    // On a terminal, beside a text report; asked for, anywhere.
    ProgressLine progress(o->progress || (!o->json_out && ::isatty(STDERR_FILENO) != 0));
    opt.progress = fit_progress(progress);
    auto result = calib::calibrate(base, o->topology, data, fixed, opt);
    progress.finish();
    const auto c = unwrap(std::move(result));
    write_file_atomic(o->out, c.document.dump(2) + "\n");
    if (o->json_out) {
      auto j = calib::report_json(c, data);
      j["out"] = o->out;
      std::cout << j.dump(1) << "\n";
      return;
    }
    print_text(c, data, o->out);
  });
}

#else

/// Built without NLopt: the command exists so that it can say what is missing.
void register_calibrate(CLI::App& app) {
  auto* sub = app.add_subcommand("calibrate", "fit topology parameters to measured run times (needs NLopt: not built)");
  sub->allow_extras();
  sub->callback([] {
    fail(Error{"calibrate",
               "this charm was built without NLopt; install libnlopt-cxx-dev (scripts/setup.sh) and rebuild"});
  });
}

#endif

const Registrar calibrate_registered{"calibrate", register_calibrate};

}  // namespace
}  // namespace charm::cli
