// charm._core's plan, validate, simulate and compare, and their bindings.
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "python/module_support.hpp"
#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/validate/validator.hpp"
#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "sim/report.hpp"
#include "sim/run_json.hpp"
#include "sim/simulator.hpp"
#include "tools/app/compare.hpp"
#include "tools/app/plans.hpp"
#include "tools/run_one.hpp"

namespace charm::python {
namespace {

// ---- JSON pieces, as the command writes them ----

using sim::memory_json;
using sim::workload_json;

// ---- plan and validate ----

/// A plan argument: a plan file (read and validated as `--plan FILE` is) or a plan's JSON as a dict.
ir::Plan plan_arg(const py::object& plan) {
  if (!py::isinstance<py::dict>(plan)) {
    const std::string path = required_path(plan, "--plan", /*dict_too=*/true);
    ir::Plan read = unwrap(app::read_plan_file(path, cli::memory_budget("")));
    return std::move(unwrap(app::proved_plan_file(std::move(read), path))).release();
  }
  auto p = ir::plan_from_json(from_py(plan, "plan"), "plan");
  if (!p) fail(Error{"--plan", p.error().message()});
  if (auto rep = sched::validate(*p); !rep.ok())
    fail(Error{"--plan", fmt::format("the plan dict is not a valid plan: {}", rep.summary(*p))});
  return std::move(p).value();
}

py::object plan_fn(const py::object& algo, const py::object& ranks, const py::object& domains, WorkloadArgs w,
                   const py::object& out, bool validate) {
  return guarded([&] {
    const std::string name = algo_arg(algo);
    const int n = given(ranks) ? int_arg(ranks, "--ranks") : app::kDefaultRanks;
    const int d = given(domains) ? int_arg(domains, "--domains") : app::kDefaultDomains;
    const app::WorkloadSpec spec = w.spec();
    const auto out_path = path_arg(out, "--out");
    if (out_path) cli::check_output_paths({{"--out", *out_path}});
    json j;
    {
      py::gil_scoped_release nogil;
      const sched::PlanRequest req = unwrap(app::plan_request(name, n, d, spec));
      if (req.workload.layout == ir::Layout::Balanced)
        fail(app::balanced_needs_topology());  // plan() takes no topology to solve the chunk map on
      auto p = unwrap(app::plan_within(req, cli::memory_budget(""), 2000, "the plan and its JSON"));
      if (validate) {
        auto rep = sched::validate(p);
        if (!rep.ok()) throw cli::RuntimeFailure{"internal: the planner produced an invalid plan: " + rep.summary(p)};
      }
      j = ir::plan_to_json(p);
      if (out_path) cli::write_file_atomic(*out_path, j.dump(1) + "\n");
    }
    return to_py(j);
  });
}

py::object validate_fn(const py::object& plan, bool all) {
  return guarded([&] {
    ir::Plan p;
    if (py::isinstance<py::dict>(plan)) {
      auto e = ir::plan_from_json(from_py(plan, "plan"), "plan");
      if (!e) fail(e.error());
      p = std::move(e).value();
    } else {
      p = cli::unwrap(ir::load_plan(required_path(plan, "plan", /*dict_too=*/true)));
    }
    sched::ValidateOptions opt;
    if (all) opt.max_violations = std::numeric_limits<std::size_t>::max();
    json j;
    {
      py::gil_scoped_release nogil;
      const auto rep = sched::validate(p, opt);
      json v = json::array();
      for (const auto& x : rep.violations) v.push_back({{"rule", x.rule}, {"message", x.message}});
      j = {{"valid", rep.ok()},        {"summary", rep.summary(p)},
           {"violations", v},          {"capped", rep.capped},
           {"ops", rep.ops},           {"computes", rep.computes},
           {"messages", rep.messages}, {"bytes_moved", rep.bytes_moved},
           {"flops", rep.flops}};
    }
    return to_py(j);
  });
}

// ---- simulate ----

/// cp=, tp=, order= and gpus= into the cluster flags, as --cp, --tp, --order and --gpus.
void placement_flags(app::Cluster& cf, const py::object& cp, const py::object& tp, const py::object& order,
                     const py::object& gpus) {
  if (given(cp)) cf.cp = int_arg(cp, "--cp");
  if (given(tp)) cf.tp = int_arg(tp, "--tp");
  if (given(order)) cf.order = text_arg(order, "--order");
  if (given(gpus)) {
    for (const auto& g : list_items(gpus, "--gpus", /*sizes=*/true)) cf.gpus += (cf.gpus.empty() ? "" : ",") + g;
    if (cf.gpus.empty()) fail(Error{"--gpus", "names no GPU"});
  }
  if ((cf.cp < 0 || cf.tp < 0) || (given(cp) && cf.cp == 0) || (given(tp) && cf.tp == 0))
    fail(Error{given(cp) && cf.cp <= 0 ? "--cp" : "--tp", "must be at least 1"});
}

using sched::SymmetryUse;

py::object simulate_fn(const py::object& algo, const py::object& plan, WorkloadArgs wa, ClusterArgs ca,
                       const py::object& symmetry, std::size_t path_limit, const py::object& trace,
                       const py::object& cp, const py::object& tp, const py::object& order, const py::object& gpus,
                       const py::object& solve_ms, const py::object& solve_seed) {
  return guarded([&] {
    const sim::ChunkSolveOptions solve = solve_args(solve_ms, solve_seed);
    const std::string sym = given(symmetry) ? text_arg(symmetry, "--symmetry") : "auto";
    const auto parsed = parse_enum(sym, sched::kSymmetryUseNames);
    if (!parsed) fail(Error{"--symmetry", fmt::format("{} not in {{auto,on,off}}", sym)});
    const SymmetryUse use = *parsed;
    app::Cluster cf = ca.flags();
    placement_flags(cf, cp, tp, order, gpus);
    const auto trace_path = path_arg(trace, "--trace");
    const std::string plan_path = given(plan) ? path_arg(plan, "--plan", /*dict_too=*/true).value_or("") : "";
    cli::check_command_files(
        {{{"--topology", cf.topology}, {"--plan", plan_path}}, {{"--trace", trace_path.value_or("")}}, {}});
    std::optional<ir::Plan> file_plan;
    if (given(plan)) {
      if (use == SymmetryUse::On)
        fail(Error{"--symmetry", "a plan file holds every rank's ops; --symmetry applies to --algo runs"});
      if (given(algo) || wa.any_given())
        fail(Error{given(algo) ? "--algo" : "--seq",
                   "the plan fixes the algorithm, ranks and workload; drop the workload arguments or plan"});
      file_plan = plan_arg(plan);
      if (cf.domains > 0) fail(Error{"--domains", "the plan file fixes the domains; drop --domains or --plan"});
      if (!cf.uniform && cf.ranks_given)
        fail(Error{"--ranks", "the plan file fixes the ranks; drop --ranks or --plan"});
      if (cf.uniform && !given(ca.ranks)) cf.ranks = file_plan->ranks;
    }
    const auto topo = ca.get(cf);
    const app::WorkloadSpec wf = wa.spec();
    const ir::Workload w = file_plan ? ir::Workload{} : cli::unwrap(wf.get());
    const std::string name = file_plan ? std::string() : algo_arg(algo);
    if (!file_plan) cli::unwrap(wf.check_layout_for(name, w));
    json j;
    {
      py::gil_scoped_release nogil;
      const sim::Evaluation r = cli::run_simulation(std::move(file_plan), name, w, cf, topo, use, solve);
      if (trace_path) cli::write_file_atomic(*trace_path, sim::chrome_trace(r.plan, r.result).dump() + "\n");
      const sim::Explanation ex = sim::explain(r.plan, r.result, topo);
      const sim::MemoryVerdict mem = sim::memory_verdict(r.summary.peak_mem_bytes, cf.reserved_gb, topo.gpu);
      j = sim::simulate_json(r, topo, ex, mem, cf.uniform, path_limit);
    }
    return to_py(j);
  });
}

// ---- compare ----

py::object compare_fn(const py::object& algos, WorkloadArgs wa, ClusterArgs ca, const py::object& cp,
                      const py::object& tp, const py::object& order, const py::object& gpus) {
  return guarded([&] {
    app::Cluster cf = ca.flags();
    placement_flags(cf, cp, tp, order, gpus);
    const auto topo = ca.get(cf);
    const app::CompareRequest req = cli::unwrap(app::compare_request(
        cli::unwrap(wa.spec().get()), cf, topo, algos_text(algos), given(wa.pass), given(wa.layout)));
    std::vector<app::CompareRow> rows;
    {
      py::gil_scoped_release nogil;
      rows = cli::run_compare(req, topo);
    }
    return to_py(app::compare_rows_json(req, rows, topo));
  });
}

}  // namespace

/// algorithms, plan, validate.
void def_planning(py::module_& m) {
  m.def(
      "algorithms", [] { return charm::sched::algorithm_names(); }, "The algorithms' names, as --algo takes them.");
  m.def(
      "plan",
      [](const py::object& algo, const py::object& ranks, const py::object& domains, const py::object& batch,
         const py::object& seq, const py::object& heads, const py::object& kv_heads, const py::object& head_dim,
         const py::object& dtype, const py::object& layout, const py::object& pass, const py::object& causal,
         const py::object& mask, const py::object& model, const py::object& out, bool validate) {
        return plan_fn(algo, ranks, domains,
                       {batch, seq, heads, kv_heads, head_dim, dtype, layout, pass, causal, mask, model}, out,
                       validate);
      },
      py::kw_only(), py::arg("algo") = py::none(), py::arg("ranks") = py::none(), py::arg("domains") = py::none(),
      CHARM_WORKLOAD_ARGS, py::arg("out") = py::none(), py::arg("validate") = true,
      "charm plan: the plan's JSON as a dict (written to `out` too when given); validated unless validate=False.");
  m.def("validate", &validate_fn, py::arg("plan"), py::kw_only(), py::arg("all") = false,
        "charm validate: a plan file or a plan dict -> {'valid', 'summary', 'violations', ...}.");
}

/// simulate, compare.
void def_simulation(py::module_& m) {
  m.def(
      "simulate",
      [](const py::object& algo, const py::object& plan, const py::object& batch, const py::object& seq,
         const py::object& heads, const py::object& kv_heads, const py::object& head_dim, const py::object& dtype,
         const py::object& layout, const py::object& pass, const py::object& causal, const py::object& mask,
         const py::object& model, const py::object& topology, const py::object& uniform, const py::object& ranks,
         const py::object& bw_gbps, const py::object& tflops, const py::object& latency_us, const py::object& hbm_gbps,
         const py::object& domains, const py::object& reserved_gb, const py::object& symmetry, std::size_t path_limit,
         const py::object& trace, const py::object& cp, const py::object& tp, const py::object& order,
         const py::object& gpus, const py::object& solve_ms, const py::object& solve_seed) {
        return simulate_fn(algo, plan,
                           {batch, seq, heads, kv_heads, head_dim, dtype, layout, pass, causal, mask, model},
                           {topology, uniform, ranks, bw_gbps, tflops, latency_us, hbm_gbps, domains, reserved_gb},
                           symmetry, path_limit, trace, cp, tp, order, gpus, solve_ms, solve_seed);
      },
      py::kw_only(), py::arg("algo") = py::none(), py::arg("plan") = py::none(), CHARM_WORKLOAD_ARGS,
      CHARM_CLUSTER_ARGS, py::arg("symmetry") = py::none(), py::arg("path_limit") = 64, py::arg("trace") = py::none(),
      py::arg("cp") = py::none(), py::arg("tp") = py::none(), py::arg("order") = py::none(),
      py::arg("gpus") = py::none(), py::arg("solve_ms") = py::none(), py::arg("solve_seed") = py::none(),
      "charm simulate --json as a dict; cp= / tp= / order= simulate every CP group of that layout at once, gpus= "
      "places one group by hand (a list or '0,2,4'); layout='balanced' solves its chunks within solve_ms= (a "
      "seed solve_seed=), as --solve-ms and --solve-seed.");
  m.def(
      "compare",
      [](const py::object& algos, const py::object& batch, const py::object& seq, const py::object& heads,
         const py::object& kv_heads, const py::object& head_dim, const py::object& dtype, const py::object& layout,
         const py::object& pass, const py::object& causal, const py::object& mask, const py::object& model,
         const py::object& topology, const py::object& uniform, const py::object& ranks, const py::object& bw_gbps,
         const py::object& tflops, const py::object& latency_us, const py::object& hbm_gbps, const py::object& domains,
         const py::object& reserved_gb, const py::object& cp, const py::object& tp, const py::object& order,
         const py::object& gpus) {
        return compare_fn(algos, {batch, seq, heads, kv_heads, head_dim, dtype, layout, pass, causal, mask, model},
                          {topology, uniform, ranks, bw_gbps, tflops, latency_us, hbm_gbps, domains, reserved_gb}, cp,
                          tp, order, gpus);
      },
      py::kw_only(), py::arg("algos") = py::none(), CHARM_WORKLOAD_ARGS, CHARM_CLUSTER_ARGS, py::arg("cp") = py::none(),
      py::arg("tp") = py::none(), py::arg("order") = py::none(), py::arg("gpus") = py::none(),
      "charm compare: one dict per (algo, pass), every row with the same keys (None where not run); cp= / tp= / "
      "order= compare every CP group of that layout at once, gpus= one group placed by hand.");
}

}  // namespace charm::python
