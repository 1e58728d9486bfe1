// The problem `charm calibrate` fits: each measured row placed on its topology and built, the kernel times
// added, the parameters chosen and those no row moves dropped.

#include "calibrate/calibration_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "scheduler/planners/planners.hpp"

namespace charm::calib::detail {

namespace {

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

}  // namespace

/// Row's figure (ms) on topology t: its plan simulated as `charm simulate` runs it.
Expected<double> simulate_row(const Row& row, const topo::Topology& t) {
  sim::SimOptions o = row.charge;
  o.index = row.index ? &*row.index : nullptr;
  auto res = sim::simulate(row.plan, t, sim::compute_model_for(t, row.plan.workload), o);
  if (!res) return res.error();
  return figure_of(sim::summarize(*res), row.metric);
}

namespace {

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

}  // namespace

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
    const auto checked = sched::CheckedRequest::check({m.algo, m.workload, row.ranks, row.domains});
    if (!checked) return Error{data.where(m, column_of(checked.error().field)), checked.error().what};
    const sched::PlanRequest& req = checked->get();
    // The budget `charm simulate` applies, before the plan is built: its plan and one simulation of it,
    // beside every plan held already.
    const sched::PlanEstimate& estimate = checked->estimate();
    if (auto st = options.memory_budget.fits(
            held_bytes + sched::simulation_bytes(estimate),
            fmt::format("planning and simulating this row ({} on {} ranks: about {:.2g} ops{})", m.algo, row.ranks,
                        estimate.ops, held_bytes > 0 ? fmt::format(", beside the plans of the rows before it") : ""),
            fmt::format("{}:{}", data.files[std::size_t(m.file)], m.line));
        !st)
      return st.error();
    held_bytes += estimate.plan_bytes;
    // The plan the simulator runs: one class of ranks where the row's symmetry and its topology's allow
    // (every figure is the full plan's; sim_quotient_test holds it to the full plan's). Only the symmetries
    // of the schedule and the topology's structure: the one by cost (zigzag halves priced alike) holds for
    // some values of the fitted parameters and not others.
    const auto quotient =
        sched::Quotient::of(*checked, sim::quotient_symmetry(sched::plan_symmetry(*checked, false), t, req.ranks));
    auto plan = quotient ? sched::make_plan(*checked, *quotient) : Expected<ir::Plan>(quotient.error());
    if (!plan) return Error{data.where(m, column_of(plan.error().field)), plan.error().what};
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
        return Error{Field::Fit, fmt::format("{} is listed twice", path)};
      if (is_fixed(path)) return Error{Field::Fit, fmt::format("{} is set from --nccl-tests, not fitted", path)};
      if (auto st = add(path); !st) return Error{Field::Fit, st.error().message()};
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
    if (auto st = add(path); !st) return Error{Field::Fit, st.error().message()};
  }
  // A profiled T_comm holds more than the run's own communication time: at small work the paper's exceeds
  // the whole run. Its offset is fitted beside the cluster's parameters so that it does not bend them.
  if (comm_rows)
    if (auto st = add(kCommOffsetParameter); !st) return Error{Field::Fit, st.error().message()};
  if (out.empty())
    return Error{Field::Fit, fmt::format("{} has none of the default parameters; name some with --fit", model.source)};
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
  if (kept.empty()) return Error{Field::Fit, "no row depends on any of the default parameters; name some with --fit"};
  model.params = std::move(kept);
  return {};
}

}  // namespace charm::calib::detail
