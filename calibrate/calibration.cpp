#include "calibrate/calibration.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include <nlopt.hpp>

#include "calibrate/normal_equations.hpp"
#include "scheduler/ir/plan_index.hpp"
#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/support/parallel_for.hpp"
#include "sim/compute_model.hpp"
#include "sim/evaluate.hpp"
#include "topologies/topology_json.hpp"

namespace charm::calib {

namespace {

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

sim::SimOptions charge_of(Metric m) {
  sim::SimOptions o;
  if (m == Metric::CommAlone) o.compute = false;
  if (m == Metric::ComputeAlone) o.comm = false;
  o.critical_path = false;
  o.peak_memory = false;
  return o;
}

/// The figure of a simulation that a row of metric `m` measured (ms).
double figure_of(const sim::Summary& s, Metric m) {
  switch (m) {
  case Metric::Compute:
    return s.busy_mean_s * 1e3;
  case Metric::Comm:
    return s.comm_busy_mean_s * 1e3;
  case Metric::Time:
  case Metric::CommAlone:
  case Metric::ComputeAlone:
    break;
  }
  return s.time_s * 1e3;
}

/// Row's figure (ms) on topology t: its plan simulated as `charm simulate` runs it.
Expected<double> simulate_row(const Row& row, const topo::Topology& t) {
  sim::SimOptions o = row.charge;
  o.index = row.index ? &*row.index : nullptr;
  auto res = sim::simulate(row.plan, t, sim::compute_model_for(t, row.plan.workload), o);
  if (!res) return res.error();
  return figure_of(sim::summarize(*res), row.metric);
}

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
    if (!obj.error) return Error{"--fit", fmt::format("the optimizer failed: {}", e.what())};
  }
  if (obj.error) return *obj.error;
  return {};
}

/// Evaluations per local search: options.max_evaluations, or 150 per parameter and one.
int max_evaluations(const Model& model) {
  return model.options->max_evaluations > 0 ? model.options->max_evaluations : int(150 * (model.params.size() + 1));
}

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

/// The topologies the rows run on: the base, and the base re-generated with more nodes for a row
/// with more ranks than it has GPUs (one variant per node count).
struct Variants {
  std::map<long, std::size_t> of_nodes;  // nodes -> variant
  std::vector<topo::Topology> topos;
};

/// Which variant `row` runs on; a new one when its ranks need more nodes than the base has.
Status place_row(Model& model, Variants& v, const std::string& at_ranks, Row& row) {
  const int base_gpus = v.topos.front().num_gpus();
  if (row.ranks <= base_gpus) return {};
  if (!model.base.contains("nodes"))
    return Error{at_ranks,
                 fmt::format("ranks {}: {} has only {} GPUs, and only a generated topology (one with \"nodes\") can be "
                             "re-generated larger",
                             row.ranks, model.source, base_gpus)};
  const long per_node = model.base.value("gpus_per_node", 1L);
  if (per_node < 1 || row.ranks % per_node != 0)
    return Error{at_ranks, fmt::format("ranks {}: more GPUs than {} has ({}), and not whole nodes of {} GPUs",
                                       row.ranks, model.source, base_gpus, per_node)};
  const long nodes = row.ranks / per_node;
  if (auto it = v.of_nodes.find(nodes); it != v.of_nodes.end()) {
    row.variant = it->second;
  } else {
    json d = model.base;
    d["nodes"] = nodes;
    auto t = topo::parse_topology(d, model.source);
    if (!t)
      return Error{at_ranks, fmt::format("ranks {} needs {} re-generated with {} nodes: {}", row.ranks, model.source,
                                         nodes, t.error().message())};
    row.variant = model.variant_nodes.size();
    v.of_nodes[nodes] = row.variant;
    model.variant_nodes.push_back(nodes);
    v.topos.push_back(std::move(t).value());
  }
  return {};
}

/// The row's domains: its column, or the topology's default where the first GPUs fill equal domains.
Status row_domains(const topo::Topology& t, const Measurement& m, const std::string& at_ranks, Row& row) {
  if (m.domains > 0) {
    row.domains = m.domains;
  } else {
    row.domains = sim::default_domains(t, row.ranks);
    // The planner's domains are equal blocks of consecutive ranks; the GPUs' must be too.
    std::vector<int> sizes(std::size_t(row.domains), 0);
    for (int g = 0; g < row.ranks; ++g) ++sizes[std::size_t(t.domain_of(g))];
    if (std::any_of(sizes.begin(), sizes.end(), [&](int s) { return s != sizes.front(); })) {
      std::string list;
      for (int s : sizes) list += fmt::format("{}{}", list.empty() ? "" : " + ", s);
      return Error{
          at_ranks,
          fmt::format("the first {} GPUs of {} span {} domains of unequal size ({}); give the domains column or "
                      "ranks that fill whole domains",
                      row.ranks, t.name, row.domains, list)};
    }
  }
  return {};
}

/// Builds the model: checks every row against the base (its GPUs, domains, the planner, the
/// simulator) and names the cell at fault.
Status build_rows(Model& model, const MeasurementSet& data, const CalibrationOptions& options,
                  std::vector<double>& base_ms) {
  double held_bytes = 0;  // the plans of the rows before: kept for the fit
  auto base_topo = topo::parse_topology(model.base, model.source);
  if (!base_topo) return base_topo.error();
  const int base_gpus = base_topo->num_gpus();
  model.variant_nodes = {0};
  Variants variants;
  variants.topos.push_back(std::move(base_topo).value());
  for (const auto& m : data.rows) {
    const std::string at_ranks = data.where(m, Column::Ranks);
    Row row;
    row.ranks = m.ranks > 0 ? m.ranks : base_gpus;
    if (auto st = place_row(model, variants, at_ranks, row); !st) return st;
    const topo::Topology& t = variants.topos[row.variant];
    if (auto st = row_domains(t, m, at_ranks, row); !st) return st;
    const sched::PlanRequest req = sim::normalised_request({m.algo, m.workload, row.ranks, row.domains});
    if (auto st = sched::check_request(req); !st)
      return Error{data.where(m, column_of_flag(st.error().where)), st.error().what};
    // The budget `charm simulate` applies, before the plan is built: its plan and one simulation of it,
    // beside every plan held already.
    const auto estimate = sched::estimate_plan(req);
    if (const double bytes = held_bytes + estimate.plan_bytes + sched::kSimBytesPerOp * estimate.ops;
        options.memory_budget_bytes > 0 && bytes > options.memory_budget_bytes)
      return Error{
          fmt::format("{}:{}", data.files[std::size_t(m.file)], m.line),
          sched::over_budget_text(
              fmt::format("planning and simulating this row ({} on {} ranks: about {:.2g} ops{})", m.algo, row.ranks,
                          estimate.ops, held_bytes > 0 ? fmt::format(", beside the plans of the rows before it") : ""),
              bytes, options.memory_budget_bytes, options.memory_budget_name)};
    held_bytes += estimate.plan_bytes;
    // The plan the simulator runs: one class of ranks where the row's symmetry and its topology's allow
    // (every figure is the full plan's; sim_quotient_test holds it to the full plan's). Only the symmetries
    // of the schedule and the topology's structure: the one by cost (zigzag halves priced alike) holds for
    // some values of the fitted parameters and not others.
    auto plan = sched::make_plan(req, sim::quotient_symmetry(sched::plan_symmetry(req, false), t, req.ranks));
    if (!plan) return Error{data.where(m, column_of_flag(plan.error().where)), plan.error().what};
    row.metric = m.metric;
    row.charge = charge_of(m.metric);
    row.plan = std::move(plan).value();
    row.index.emplace(row.plan, nullptr, ir::PlanIndex::Parts::Lean);
    auto simulated = simulate_row(row, t);
    if (!simulated)
      return Error{at_ranks, fmt::format("the simulator cannot run this row: {}", simulated.error().message())};
    const double predicted = *simulated;
    // No fit within the physical bounds moves a time by 100x: such a row is a unit mistake.
    if (const double ratio = m.time_ms / predicted; !(ratio > 1e-2 && ratio < 1e2))
      return Error{data.where(m, Column::TimeMs),
                   fmt::format("time_ms {} is {:.3g}x what the base topology predicts for this run ({:.4g} ms); "
                               "time_ms is in milliseconds (a time in seconds or microseconds?)",
                               m.time_ms, ratio, predicted)};
    base_ms.push_back(predicted);
    model.rows.push_back(std::move(row));
  }
  return {};
}

/// Adds the single-GPU kernel times to the model (after the runs) with their base predictions.
/// A time 100x off the base's kernel model is a unit mistake, refused by its cell.
Status add_kernels(Model& model, const KernelTimeSet& kernels, std::vector<double>& base_ms) {
  if (kernels.rows.empty()) return {};
  auto t = topo::parse_topology(model.base, model.source);
  if (!t) return t.error();
  for (const auto& k : kernels.rows) {
    const double predicted = Model::kernel_ms(k, *t);
    if (const double ratio = k.time_ms / predicted; !(ratio > 1e-2 && ratio < 1e2))
      return Error{fmt::format("{}:{}", kernels.source, k.line),
                   fmt::format("time_ms {} is {:.3g}x what the base topology's kernel model gives ({:.4g} ms); "
                               "time_ms is in milliseconds (a time in seconds or microseconds?)",
                               k.time_ms, ratio, predicted)};
    model.kernels.push_back(k);
    model.measured.push_back(k.time_ms);
    base_ms.push_back(predicted);
  }
  return {};
}

/// The parameters to fit, with their bounds; errors name the path. A rate limit of 0 ("none") in the base
/// becomes its link's rate there, where the fit starts.
Expected<std::vector<FitParameter>> choose_parameters(Model& model, const std::vector<std::string>& requested,
                                                      const std::vector<FixedParameter>& fixed, bool comm_rows,
                                                      std::vector<std::string>& notes) {
  auto is_fixed = [&](const std::string& p) {
    return std::any_of(fixed.begin(), fixed.end(), [&](const auto& f) { return f.path == p; });
  };
  std::vector<FitParameter> out;
  auto add = [&](const std::string& path) -> Status {
    auto v = is_measurement_parameter(path) ? Expected<double>(0.0) : parameter_value(model.base, path, model.source);
    if (!v) return v.error();
    // A rate limit of 0 means "none below the link": the link's own rate is where a fit starts.
    if (*v == 0 && path.size() > 5 && path.compare(path.size() - 5, 5, "_gbps") == 0) {
      const std::string link = path.substr(0, path.rfind('.')) + ".bandwidth_gbps";
      if (auto bw = parameter_value(model.base, link, model.source); bw && *bw > 0) {
        notes.push_back(fmt::format("{}: 0 (no limit) in the base; fitted from {} = {:g}", path, link, *bw));
        set_parameter(model.base, path, *bw);
        v = *bw;
      }
    }
    auto b = bounds_for(path, *v);
    if (!b) return b.error();
    FitParameter p;
    p.path = path;
    p.base = *v;
    p.value = *v;
    p.bounds = *b;
    if (is_measurement_parameter(path)) p.note = "of the measurement, not the cluster: not written into the topology";
    if (!b->known) {
      p.note = b->rule;
      notes.push_back(fmt::format("{}: {}", path, b->rule));
    }
    out.push_back(std::move(p));
    return {};
  };
  if (!requested.empty()) {
    for (const auto& path : requested) {
      if (std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.path == path; }))
        return Error{"--fit", fmt::format("{} is listed twice", path)};
      if (is_fixed(path)) return Error{"--fit", fmt::format("{} is set from --nccl-tests, not fitted", path)};
      if (auto st = add(path); !st) return Error{"--fit", st.error().message()};
    }
    return out;
  }
  std::vector<std::string> defaults = default_fit_parameters();
  // On a shared GPU link (PCIe) the link rate itself is what runs short; on a
  // dedicated one (NVLink) it is the injection limit, already in the list.
  if (model.base.contains("intra") &&
      parse_enum(model.base["intra"].value("sharing", ""), topo::kSharingNames) == topo::Sharing::Shared)
    defaults.push_back("intra.bandwidth_gbps");
  for (const auto& path : defaults) {
    if (is_fixed(path) || !parameter_value(model.base, path, model.source)) continue;
    if (auto st = add(path); !st) return Error{"--fit", st.error().message()};
  }
  // A profiled T_comm holds more than the run's own communication time: at small work the paper's exceeds
  // the whole run. Its offset is fitted beside the cluster's parameters so that it does not bend them.
  if (comm_rows)
    if (auto st = add(kCommOffsetParameter); !st) return Error{"--fit", st.error().message()};
  if (out.empty())
    return Error{"--fit", fmt::format("{} has none of the default parameters; name some with --fit", model.source)};
  return out;
}

/// The default parameters no row depends on (efficiency.bwd with forward rows only) are dropped:
/// the fit could not tell their value, and the report would show a meaningless one.
Status drop_unmoved(Model& model, const std::vector<double>& base_ms, std::vector<std::string>& notes) {
  const std::size_t p = model.params.size(), N = model.measured.size();
  const std::vector<char> all(N, 1);
  std::vector<FitParameter> kept;
  std::vector<double> values;
  for (const auto& q : model.params) values.push_back(q.base);
  std::vector<std::vector<double>> points;
  for (std::size_t k = 0; k < p; ++k) {
    auto moved = values;
    const auto& q = model.params[k];
    moved[k] = q.bounds.scale == Scale::Log ? std::sqrt(q.bounds.lo * q.bounds.hi) : 0.5 * (q.bounds.lo + q.bounds.hi);
    if (moved[k] == values[k]) moved[k] = q.bounds.lo;
    points.push_back(std::move(moved));
  }
  model.progress.begin("parameters the rows move");
  auto pred = model.predict_at(points, {all});
  if (!pred) return pred.error();
  for (std::size_t k = 0; k < p; ++k) {
    bool moves = false;
    for (std::size_t i = 0; i < N; ++i) moves = moves || std::abs((*pred)[k][i] / base_ms[i] - 1) > 1e-9;
    if (moves)
      kept.push_back(model.params[k]);
    else
      notes.push_back(fmt::format("{}: not fitted, no row depends on it", model.params[k].path));
  }
  if (kept.empty()) return Error{"--fit", "no row depends on any of the default parameters; name some with --fit"};
  model.params = std::move(kept);
  return {};
}

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

/// The residuals' Jacobian at the fit, d(residual)/d(theta) with theta = log(value) (log scale) or
/// value (linear), by central differences: the uncertainty's and the one-step leave-one-out's.
struct Sensitivity {
  Matrix J;
  std::vector<double> r;    // the residuals at the fit
  std::vector<char> moves;  // per parameter: some residual depends on it
};

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

}  // namespace

Expected<std::vector<FixedParameter>> fixed_from_nccl_tests(const json& base, const std::string& base_source,
                                                            const std::string& cls, const NcclLog& log) {
  const std::string where = "--nccl-tests";
  const auto link_class = parse_enum(cls, kLinkClassNames);
  if (!link_class) return Error{where, fmt::format("unknown link class '{}' (expected intra, numa or inter)", cls)};
  if (!base.contains("nodes"))
    return Error{where,
                 fmt::format("{} is an explicit topology; link classes belong to the generator form", base_source)};
  if (!base.contains(cls) || !base[cls].is_object())
    return Error{where, fmt::format("{} has no '{}' block", base_source, cls)};
  auto ab = fit_alpha_beta(log);
  if (!ab) return ab.error();
  // A pair of GPUs whose route crosses the class: GPU 0 and its neighbour in the same NUMA
  // node (intra), the first GPU of the next NUMA node (numa) or of the next node (inter).
  json probe = base;
  const long per_node = base.value("gpus_per_node", 1L), numa = base.value("numa_per_node", 1L);
  int dst = 1;
  if (*link_class == LinkClass::Numa) {
    if (numa < 2)
      return Error{where, fmt::format("{} has one NUMA node per node: no numa link to measure", base_source)};
    dst = int(per_node / numa);
  } else if (*link_class == LinkClass::Inter) {
    if (base.value("nodes", 1L) < 2) probe["nodes"] = 2;
    dst = int(per_node);
  } else if (per_node / numa < 2) {
    return Error{where, fmt::format("{} has one GPU per NUMA node: no intra link pair to measure", base_source)};
  }
  // The route's latency is linear in the class's: k links of it plus the others'.
  double lat[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    probe[cls]["latency_us"] = double(i);
    auto t = topo::parse_topology(probe, base_source);
    if (!t) return t.error();
    lat[i] = t->route_latency_us(0, dst);
  }
  const double k = lat[1] - lat[0], others = lat[0];
  if (!(k > 0)) return Error{where, fmt::format("no route of {} crosses a '{}' link", base_source, cls)};
  const double latency = std::max(0.0, (ab->alpha_us - others) / k);
  const json detail = {{"alpha_us", ab->alpha_us},
                       {"beta_gbps", ab->beta_gbps},
                       {"bus_factor", ab->bus_factor},
                       {"busbw_gbps", ab->busbw_gbps},
                       {"peak_busbw_gbps", ab->peak_busbw_gbps},
                       {"rows", ab->rows},
                       {"links_on_route", k},
                       {"other_latency_us", others}};
  std::vector<FixedParameter> out;
  auto base_of = [&](const char* key, double dflt) {
    return base[cls].contains(key) && base[cls][key].is_number() ? base[cls][key].get<double>() : dflt;
  };
  out.push_back({cls + ".bandwidth_gbps", ab->busbw_gbps, base_of("bandwidth_gbps", kNaN), log.source, detail});
  out.push_back({cls + ".latency_us", latency, base_of("latency_us", 0), log.source, detail});
  return out;
}

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
