// charm._core: the `charm` command's plan, validate, simulate, compare, advise and sweep as Python
// functions. Each takes the command's flags as keyword arguments (--head-dim is head_dim, --pass is
// pass_) and calls the library the command calls: the CLI's own flag objects (PlanFlags, ClusterFlags,
// WorkloadFlags: the same defaults, checks and messages), sched::make_plan, sim::evaluate_plan,
// sim::advise, sim::run_sweep. Results are the command's --json documents as dicts; compare and sweep
// give one flat dict per row, every row with the same keys. A usage error (cli::fail, an Error value)
// is a ValueError whose text is the line the command prints after "charm: error: "; a simulator
// failure (the command's exit 3) is a RuntimeError. A wrongly typed argument is a TypeError naming its
// keyword; every argument is read before the work releases the GIL (docs/errors.md, the Python module).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/planners.hpp"
#include "scheduler/support/json_text.hpp"
#include "scheduler/validate/validator.hpp"
#include "sim/advise.hpp"
#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "sim/frameworks.hpp"
#include "sim/report.hpp"
#include "sim/run_json.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"
#include "tools/advise_report.hpp"
#include "tools/cli_common.hpp"
#include "tools/cluster_flags.hpp"
#include "tools/compare_report.hpp"
#include "tools/plan_flags.hpp"
#include "tools/run_one.hpp"
#include "tools/sweep_request.hpp"
#include "topologies/topology_json.hpp"

namespace py = pybind11;
using nlohmann::json;

namespace charm::python {
namespace {

using cli::fail;

// ---- JSON <-> Python ----

py::object to_py(const json& j) {
  switch (j.type()) {
  case json::value_t::null:
    return py::none();
  case json::value_t::boolean:
    return py::bool_(j.get<bool>());
  case json::value_t::number_integer:
    return py::int_(j.get<std::int64_t>());
  case json::value_t::number_unsigned:
    return py::int_(j.get<std::uint64_t>());
  case json::value_t::number_float:
    return py::float_(j.get<double>());
  case json::value_t::string:
    return py::str(j.get_ref<const std::string&>());
  case json::value_t::array: {
    py::list l;
    for (const auto& e : j) l.append(to_py(e));
    return l;
  }
  case json::value_t::object: {
    py::dict d;
    for (const auto& [k, v] : j.items()) d[py::str(k)] = to_py(v);
    return d;
  }
  default:
    return py::none();
  }
}

/// A Python value's type name, for messages.
std::string type_name(py::handle h) { return py::str(py::type::handle_of(h).attr("__name__")).cast<std::string>(); }

/// A dict or list holds at most this many values in all: one that holds another many times over counts it
/// each time (x = [x, x] twenty times is a million), so a few lines of Python cannot ask for gigabytes.
/// A plan of about 900,000 ops fits (some 18 values an op); a larger one goes as a file.
constexpr std::size_t kMaxJsonValues = std::size_t{1} << 24;

/// Python values into JSON, bounded as the JSON reader bounds a file: arrays and objects at most
/// kMaxJsonDepth deep (a dict that holds itself ends there instead of recursing until the stack runs
/// out), and kMaxJsonValues values. Numbers as a file's are read: finite, within 64 bits.
json from_py(py::handle h, const std::string& where, std::size_t depth, std::size_t& values) {
  if (++values > kMaxJsonValues)
    fail(Error{where, fmt::format("more than {} values (a list or dict held many times counts each time; pass a "
                                  "larger plan as a file)",
                                  kMaxJsonValues)});
  if (h.is_none()) return nullptr;
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow == 0) return std::int64_t{v};
    const unsigned long long u = PyLong_AsUnsignedLongLong(h.ptr());
    if (!PyErr_Occurred()) return std::uint64_t{u};
    PyErr_Clear();
    fail(Error{where, "an int past 64 bits is not a JSON number"});
  }
  if (py::isinstance<py::float_>(h)) {
    const double v = h.cast<double>();
    if (!std::isfinite(v)) fail(Error{where, fmt::format("JSON has no NaN or infinity, got {}", v)});
    return v;
  }
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  const bool dict = py::isinstance<py::dict>(h);
  if (!dict && !py::isinstance<py::list>(h) && !py::isinstance<py::tuple>(h))
    fail(Error{where, fmt::format("a {} is not a JSON value", type_name(h))});
  if (depth == kMaxJsonDepth)
    fail(Error{where, fmt::format("arrays and objects nested more than {} deep (a dict or list that holds itself?)",
                                  kMaxJsonDepth)});
  if (dict) {
    json o = json::object();
    for (auto [k, v] : h.cast<py::dict>()) {
      if (!py::isinstance<py::str>(k)) fail(Error{where, "keys of a JSON object must be strings"});
      const auto key = k.cast<std::string>();
      o[key] = from_py(v, where + "." + key, depth + 1, values);
    }
    return o;
  }
  json a = json::array();
  std::size_t i = 0;
  for (auto v : h) a.push_back(from_py(v, fmt::format("{}[{}]", where, i++), depth + 1, values));
  return a;
}

json from_py(py::handle h, const std::string& where) {
  std::size_t values = 0;
  return from_py(h, where, 0, values);
}

// ---- arguments ----
//
// Every argument is read and checked here, with the GIL held, before the work starts: the work runs with
// the GIL released, where reading a Python object would crash the process. A wrong type is a TypeError
// naming the keyword; a value the command would refuse is a ValueError naming the flag, as the command does.

bool given(const py::object& o) { return !o.is_none(); }

/// The keyword of a flag: --head-dim is head_dim, --pass is pass_.
std::string keyword(const std::string& flag) {
  std::string k = flag.starts_with("--") ? flag.substr(2) : flag;
  std::replace(k.begin(), k.end(), '-', '_');
  return k == "pass" ? "pass_" : k;
}

[[noreturn]] void type_error(const std::string& flag, const std::string& expected, py::handle got) {
  std::string shown = py::repr(got).cast<std::string>();
  if (shown.size() > 40) shown = shown.substr(0, 37) + "...";
  throw py::type_error(fmt::format("{}: expected {}, got {} ({})", keyword(flag), expected, shown, type_name(got)));
}

/// A whole number (an int, not a bool) that fits the flag's 32 bits.
int int_arg(const py::object& o, const std::string& flag) {
  if (!py::isinstance<py::int_>(o) || py::isinstance<py::bool_>(o)) type_error(flag, "an int", o);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(o.ptr(), &overflow);
  if (overflow != 0 || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    fail(Error{flag, "must fit 32 bits"});
  return int(v);
}

/// A finite real number (an int or a float, not a bool).
double real_arg(const py::object& o, const std::string& flag) {
  if (!(py::isinstance<py::int_>(o) || py::isinstance<py::float_>(o)) || py::isinstance<py::bool_>(o))
    type_error(flag, "a number", o);
  const double v = PyFloat_AsDouble(o.ptr());
  if (v == -1.0 && PyErr_Occurred()) PyErr_Clear();  // an int past a double's range
  if (!std::isfinite(v)) fail(Error{flag, "must be a finite number"});
  return v;
}

bool bool_arg(const py::object& o, const std::string& flag) {
  if (!py::isinstance<py::bool_>(o)) type_error(flag, "True or False", o);
  return o.cast<bool>();
}

/// A path given as str or os.PathLike (or, where `dict_too`, a dict, which is no path); nullopt for None.
std::optional<std::string> path_arg(const py::object& o, const std::string& flag, bool dict_too = false) {
  if (!given(o) || (dict_too && py::isinstance<py::dict>(o))) return std::nullopt;
  if (!py::isinstance<py::str>(o) && !py::hasattr(o, "__fspath__"))
    type_error(flag, dict_too ? "a path (str or os.PathLike) or a dict" : "a path (str or os.PathLike)", o);
  auto p = py::module_::import("os").attr("fspath")(o).cast<std::string>();
  // The C library would stop at the NUL and read or write another file.
  if (p.empty() || p.find('\0') != std::string::npos)
    fail(Error{flag, p.empty() ? "the path is empty" : "the path holds a NUL byte"});
  return p;
}

/// A path that must be given: None is a TypeError, not "no file".
std::string required_path(const py::object& o, const std::string& flag, bool dict_too = false) {
  if (!given(o))
    type_error(flag, dict_too ? "a path (str or os.PathLike) or a dict" : "a path (str or os.PathLike)", o);
  return *path_arg(o, flag, dict_too);
}

/// A count or size as the command reads it ("26880", "4k"): an int or a str.
std::string size_text(const py::object& o, const std::string& flag) {
  if (py::isinstance<py::int_>(o) && !py::isinstance<py::bool_>(o)) return py::str(o).cast<std::string>();
  if (py::isinstance<py::str>(o)) return o.cast<std::string>();
  type_error(flag, "an int or a size like '4k'", o);
}

std::string text_arg(const py::object& o, const std::string& flag) {
  if (!py::isinstance<py::str>(o)) type_error(flag, "a str", o);
  return o.cast<std::string>();
}

/// A list flag: a str (comma-separated, as on the command line), or a list/tuple of items.
std::vector<std::string> list_items(const py::object& o, const std::string& flag, bool sizes = false) {
  if (py::isinstance<py::str>(o) || (sizes && py::isinstance<py::int_>(o)))
    return cli::split_list(sizes ? size_text(o, flag) : text_arg(o, flag));
  if (!py::isinstance<py::list>(o) && !py::isinstance<py::tuple>(o))
    type_error(flag, sizes ? "an int, a str or a list of them" : "a str or a list of str", o);
  std::vector<std::string> out;
  for (auto v : o) {
    const py::object item = py::reinterpret_borrow<py::object>(v);
    out.push_back(sizes ? size_text(item, flag) : text_arg(item, flag));
  }
  return out;
}

std::string algos_text(const py::object& o) {
  if (!given(o)) return {};
  std::string s;
  for (const auto& a : list_items(o, "--algos")) s += (s.empty() ? "" : ",") + a;
  if (s.empty()) fail(Error{"--algos", "names no algorithm"});
  return s;
}

/// The workload flags; each argument None is the command's default.
struct WorkloadArgs {
  py::object batch, seq, heads, kv_heads, head_dim, dtype, layout, pass, causal, mask, model;
  [[nodiscard]] bool any_given() const {
    return given(batch) || given(seq) || given(heads) || given(kv_heads) || given(head_dim) || given(dtype) ||
           given(layout) || given(pass) || given(causal) || given(mask) || given(model);
  }
  [[nodiscard]] cli::WorkloadFlags flags() const {
    cli::WorkloadFlags f;
    if (given(batch)) f.batch = size_text(batch, "--batch");
    if (given(seq)) f.seq = size_text(seq, "--seq");
    if (given(heads)) f.heads = size_text(heads, "--heads");
    if (given(kv_heads)) f.kv_heads = size_text(kv_heads, "--kv-heads");
    if (given(head_dim)) f.head_dim = size_text(head_dim, "--head-dim");
    if (given(dtype)) f.dtype = text_arg(dtype, "--dtype");
    if (given(layout)) f.layout = text_arg(layout, "--layout");
    if (given(pass)) f.pass = text_arg(pass, "--pass");
    if (given(causal)) f.causal = bool_arg(causal, "--causal");
    if (given(mask)) f.mask = text_arg(mask, "--mask");
    if (given(model)) f.model = *path_arg(model, "--model");
    return f;
  }
};

#define CHARM_WORKLOAD_ARGS                                                                                            \
  py::arg("batch") = py::none(), py::arg("seq") = py::none(), py::arg("heads") = py::none(),                           \
  py::arg("kv_heads") = py::none(), py::arg("head_dim") = py::none(), py::arg("dtype") = py::none(),                   \
  py::arg("layout") = py::none(), py::arg("pass_") = py::none(), py::arg("causal") = py::none(),                       \
  py::arg("mask") = py::none(), py::arg("model") = py::none()

std::string algo_arg(const py::object& o) {
  if (!given(o)) return std::string(sched::default_algorithm());
  auto a = sched::resolve_algorithm(text_arg(o, "--algo"), "--algo");
  if (!a) fail(a.error());
  return *a;
}

/// Where the cluster comes from: topology (a file, or its JSON as a dict) or uniform=True with its numbers.
struct ClusterArgs {
  py::object topology, uniform, ranks, bw_gbps, tflops, latency_us, hbm_gbps, domains, reserved_gb;

  [[nodiscard]] cli::ClusterFlags flags() const {
    cli::ClusterFlags f;
    f.uniform = given(uniform) && bool_arg(uniform, "--uniform");
    if (auto p = path_arg(topology, "--topology", /*dict_too=*/true)) f.topology = *p;
    if (given(ranks)) {
      f.ranks = int_arg(ranks, "--ranks");
      f.ranks_given = true;
    }
    if (given(bw_gbps)) f.bw_gbps = real_arg(bw_gbps, "--bw-gbps");
    if (given(tflops)) f.tflops = real_arg(tflops, "--tflops");
    if (given(latency_us)) f.latency_us = real_arg(latency_us, "--latency-us");
    if (given(hbm_gbps)) f.hbm_gbps = real_arg(hbm_gbps, "--hbm-gbps");
    if (given(reserved_gb)) f.reserved_gb = real_arg(reserved_gb, "--reserved-gb");
    if (given(domains)) {
      f.domains = int_arg(domains, "--domains");
      if (f.domains < 1)
        fail(Error{"--domains", fmt::format("must be >= 1 (or omitted: from the topology), got {}", f.domains)});
    }
    return f;
  }
  /// The topology, checked as ClusterFlags::get checks the command's flags.
  [[nodiscard]] topo::Topology get(cli::ClusterFlags& f) const {
    const bool dict = py::isinstance<py::dict>(topology);
    if (!f.uniform) {
      const std::pair<const char*, const py::object*> uniform_only[] = {
          {"--bw-gbps", &bw_gbps}, {"--tflops", &tflops}, {"--latency-us", &latency_us}, {"--hbm-gbps", &hbm_gbps}};
      for (const auto& [flag, o] : uniform_only)
        if (given(*o))
          fail(Error{flag, "describes the --uniform cluster only; with --topology the file's numbers apply "
                           "(edit a copy of the file to ask what if)"});
    }
    if (!dict) return f.get();
    if (f.uniform) fail(Error{"--topology", "give exactly one of --topology FILE and --uniform"});
    // The dict's own checks are the file's; reserved_gb's are ClusterFlags'.
    if (!(f.reserved_gb >= 0) || !std::isfinite(f.reserved_gb) || f.reserved_gb > 1e4)
      fail(Error{"--reserved-gb", fmt::format("must be a number of GB in [0, 10000], got {}", f.reserved_gb)});
    auto t = topo::parse_topology(from_py(topology, "topology"), "topology");
    if (!t) fail(t.error());
    return std::move(t).value();
  }
};

#define CHARM_CLUSTER_ARGS                                                                                             \
  py::arg("topology") = py::none(), py::arg("uniform") = py::none(), py::arg("ranks") = py::none(),                    \
  py::arg("bw_gbps") = py::none(), py::arg("tflops") = py::none(), py::arg("latency_us") = py::none(),                 \
  py::arg("hbm_gbps") = py::none(), py::arg("domains") = py::none(), py::arg("reserved_gb") = py::none()

/// Runs `f` with the command's error path: a usage error is a ValueError, a runtime failure a RuntimeError.
template <class F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const cli::UsageError& e) {
    throw py::value_error(e.error.message());
  } catch (const cli::RuntimeFailure& e) {
    throw std::runtime_error(e.message);
  }
}

// ---- JSON pieces, as the command writes them ----

using sim::memory_json;
using sim::workload_json;

// ---- plan and validate ----

/// A plan argument: a plan file (read and validated as `--plan FILE` is) or a plan's JSON as a dict.
ir::Plan plan_arg(const py::object& plan) {
  if (!py::isinstance<py::dict>(plan)) {
    cli::PlanFlags f;
    f.plan_file = required_path(plan, "--plan", /*dict_too=*/true);
    return f.make();
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
    cli::PlanFlags f;
    f.algo = algo_arg(algo);
    if (given(ranks)) f.ranks = int_arg(ranks, "--ranks");
    if (given(domains)) f.domains = int_arg(domains, "--domains");
    f.workload = w.flags();
    const auto out_path = path_arg(out, "--out");
    if (out_path) cli::check_output_paths({{"--out", *out_path}});
    json j;
    {
      py::gil_scoped_release nogil;
      auto p = f.make(2000, "the plan and its JSON");
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
void placement_flags(cli::ClusterFlags& cf, const py::object& cp, const py::object& tp, const py::object& order,
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

using cli::run_one;
using cli::SymmetryUse;

/// The balanced layout's solver: solve_ms= and solve_seed=, as --solve-ms and --solve-seed.
sim::ChunkSolveOptions solve_args(const py::object& solve_ms, const py::object& solve_seed) {
  cli::WorkloadFlags f;
  if (given(solve_ms)) f.solve_ms = real_arg(solve_ms, "--solve-ms");
  if (given(solve_seed)) {
    const int seed = int_arg(solve_seed, "--solve-seed");
    if (seed < 0) fail(Error{"--solve-seed", fmt::format("must be >= 0, got {}", seed)});
    f.solve_seed = std::uint64_t(seed);
  }
  return f.solve_options();
}

py::object simulate_fn(const py::object& algo, const py::object& plan, WorkloadArgs wa, ClusterArgs ca,
                       const py::object& symmetry, std::size_t path_limit, const py::object& trace,
                       const py::object& cp, const py::object& tp, const py::object& order, const py::object& gpus,
                       const py::object& solve_ms, const py::object& solve_seed) {
  return guarded([&] {
    const sim::ChunkSolveOptions solve = solve_args(solve_ms, solve_seed);
    const std::string sym = given(symmetry) ? text_arg(symmetry, "--symmetry") : "auto";
    if (sym != "auto" && sym != "on" && sym != "off")
      fail(Error{"--symmetry", fmt::format("{} not in {{auto,on,off}}", sym)});
    const SymmetryUse use = sym == "on" ? SymmetryUse::On : sym == "off" ? SymmetryUse::Off : SymmetryUse::Auto;
    cli::ClusterFlags cf = ca.flags();
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
    const ir::Workload w = file_plan ? ir::Workload{} : wa.flags().get();
    const std::string name = file_plan ? std::string() : algo_arg(algo);
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
    cli::ClusterFlags cf = ca.flags();
    placement_flags(cf, cp, tp, order, gpus);
    const auto topo = ca.get(cf);
    const cli::CompareRequest req =
        cli::compare_request(wa.flags().get(), cf, topo, algos_text(algos), given(wa.pass), given(wa.layout));
    std::vector<cli::CompareRow> rows;
    {
      py::gil_scoped_release nogil;
      rows = cli::run_compare(req, topo);
    }
    return to_py(cli::compare_rows_json(req, rows, topo));
  });
}

// ---- advise ----

py::object advise_fn(const py::object& algos, WorkloadArgs wa, ClusterArgs ca, const py::object& jobs,
                     const py::object& tp, const py::object& tp_search, const py::object& order,
                     const py::object& layers, const py::object& tie, const py::object& runnable,
                     const py::object& solve_ms, const py::object& solve_seed) {
  return guarded([&] {
    const sim::ChunkSolveOptions solve = solve_args(solve_ms, solve_seed);
    cli::ClusterFlags cf = ca.flags();
    if (given(tp)) cf.tp = int_arg(tp, "--tp");
    if (given(tp) && cf.tp < 1) fail(Error{"--tp", "must be at least 1"});
    if (given(order)) cf.order = text_arg(order, "--order");
    const auto topo = ca.get(cf);
    cli::AdviseFlags f;
    f.algos = algos_text(algos);
    f.pass_given = given(wa.pass);
    f.layout_given = given(wa.layout);
    if (given(jobs)) f.jobs = int_arg(jobs, "--jobs");
    if (given(jobs) && f.jobs == 0) fail(Error{"--jobs", "must be in [1, 1024] (or omitted), got 0"});
    if (given(tp_search)) {
      for (const auto& item : list_items(tp_search, "--tp-search", /*sizes=*/true))
        f.tp_search += (f.tp_search.empty() ? "" : ",") + item;
      if (f.tp_search.empty()) fail(Error{"--tp-search", "names no TP size"});
    }
    const cli::WorkloadFlags wf = wa.flags();
    if (const int n = wf.model_layers(); n > 0) f.layers = n;  // a model's config gives its layers unless layers= does
    if (given(layers)) f.layers = int_arg(layers, "--layers");
    if (given(tie)) f.tie_percent = real_arg(tie, "--tie");
    if (given(runnable)) f.runnable = bool_arg(runnable, "--runnable");
    f.chunks = solve;
    const cli::AdviseRequest req = cli::advise_request(wf.get(), cf, topo, f);
    std::optional<sim::Advice> adv;
    {
      py::gil_scoped_release nogil;
      adv = cli::run_advise(req, topo);
    }
    return to_py(cli::advice_json(req, *adv, topo));
  });
}

// ---- sweep ----

/// A workload list, read as the command reads its flag (cli::parse_list: ranges, the cap on values).
std::vector<std::int64_t> size_list(const py::object& o, const std::string& flag) {
  std::string text;
  for (const auto& item : list_items(o, flag, /*sizes=*/true)) text += (text.empty() ? "" : ",") + item;
  return cli::unwrap(cli::parse_list(text, flag));
}

/// set={'inter.bandwidth_gbps': [25, 50]}: each entry as the command's --set FIELD=LIST (a number, a list of
/// numbers, or the flag's own text like '25..100*2'), read by cli::parse_sets with the command's caps.
std::vector<cli::SetFlag> set_arg(const py::object& set) {
  if (!given(set)) return {};
  if (!py::isinstance<py::dict>(set)) type_error("set", "a dict like {'inter.bandwidth_gbps': [25, 50]}", set);
  const auto number = [](const py::object& v) {
    if (py::isinstance<py::float_>(v)) return fmt::format("{}", v.cast<double>());  // shortest exact text
    if (py::isinstance<py::int_>(v) && !py::isinstance<py::bool_>(v)) return py::str(v).cast<std::string>();
    type_error("set", "numbers as values", v);
  };
  std::vector<std::string> texts;
  for (auto [k, v] : set.cast<py::dict>()) {
    if (!py::isinstance<py::str>(k)) type_error("set", "field names (str) as keys", k);
    const py::object vo = py::reinterpret_borrow<py::object>(v);
    std::string list;
    if (py::isinstance<py::str>(vo)) {
      list = vo.cast<std::string>();
    } else if (py::isinstance<py::list>(vo) || py::isinstance<py::tuple>(vo)) {
      for (auto x : vo) list += (list.empty() ? "" : ",") + number(py::reinterpret_borrow<py::object>(x));
    } else {
      list = number(vo);
    }
    texts.push_back(k.cast<std::string>() + "=" + list);
  }
  std::size_t points = 1;
  return cli::parse_sets(texts, points);
}

/// Topologies: a file, a dict, or a list of them (a str may list files comma-separated, as the flag does).
std::vector<cli::SweepTopology> sweep_topology_args(const py::object& topology) {
  std::vector<py::object> args;
  if (py::isinstance<py::list>(topology) || py::isinstance<py::tuple>(topology)) {
    for (auto t : topology) args.push_back(py::reinterpret_borrow<py::object>(t));
  } else if (py::isinstance<py::str>(topology)) {
    for (const auto& f : cli::split_list(topology.cast<std::string>())) args.emplace_back(py::str(f));
  } else {
    args.push_back(topology);
  }
  if (args.empty()) fail(Error{"--topology", "names no topology"});
  std::vector<cli::SweepTopology> docs;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool dict = py::isinstance<py::dict>(args[i]);
    const std::string name =
        dict ? fmt::format("topology[{}]", i) : required_path(args[i], "--topology", /*dict_too=*/true);
    auto doc = dict ? Expected<json>(from_py(args[i], name)) : topo::read_topology_json(name);
    if (!doc) fail(Error{"--topology", doc.error().message()});
    docs.push_back({name, std::move(doc).value()});
  }
  return docs;
}

/// The sweep's spec from its arguments, checked as charm sweep checks its flags (sweep_request.hpp).
sim::SweepSpec sweep_spec(const py::object& topology, const py::object& batch, const py::object& seq,
                          const py::object& heads, const py::object& head_dim, const py::object& kv_heads,
                          const py::object& dtype, bool causal, const py::object& layout, const py::object& algos,
                          const std::string& pass, double reserved_gb, const py::object& set, const py::object& tp,
                          const py::object& cp, const py::object& domains) {
  const std::vector<cli::SetFlag> sets = set_arg(set);
  const std::vector<cli::SweepTopology> docs = sweep_topology_args(topology);
  sim::SweepSpec spec = cli::sweep_topologies(docs, sets);
  for (const auto& w : spec.warnings) std::cerr << "charm: warning: " << w << "\n";
  cli::SweepLists lists;
  // None: charm simulate's defaults (batch 1, seq 4k, 8 heads of 128).
  lists.batch = given(batch) ? size_list(batch, "--batch") : std::vector<std::int64_t>{1};
  lists.seq = given(seq) ? size_list(seq, "--seq") : std::vector<std::int64_t>{4096};
  lists.heads = given(heads) ? size_list(heads, "--heads") : std::vector<std::int64_t>{8};
  lists.head_dim = given(head_dim) ? size_list(head_dim, "--head-dim") : std::vector<std::int64_t>{128};
  if (given(kv_heads)) lists.kv_heads = size_list(kv_heads, "--kv-heads");
  if (given(tp)) lists.tp = size_list(tp, "--tp");
  if (given(cp)) lists.cp = size_list(cp, "--cp");
  if (given(domains)) lists.domains = size_list(domains, "--domains");
  lists.dtypes = list_items(dtype, "--dtype");
  lists.layouts = list_items(layout, "--layout");
  lists.causal = causal;
  lists.algos = algos_text(algos);
  lists.pass = pass;
  lists.reserved_gb = reserved_gb;
  cli::set_sweep_lists(spec, lists);
  std::vector<std::string> names;
  for (const auto& d : docs) names.push_back(d.name);
  // The configuration cap, and each (topology, algorithm, pass, layout, mask)'s simulation must fit.
  cli::check_sweep_fits(spec, names);
  return spec;
}

py::object sweep_fn(const py::object& topology, const py::object& batch, const py::object& seq, const py::object& heads,
                    const py::object& head_dim, const py::object& kv_heads, const py::object& dtype, bool causal,
                    const py::object& layout, const py::object& algos, const std::string& pass, const py::object& jobs,
                    double reserved_gb, const py::object& set, const py::object& tp, const py::object& cp,
                    const py::object& domains) {
  return guarded([&] {
    const sim::SweepSpec spec = sweep_spec(topology, batch, seq, heads, head_dim, kv_heads, dtype, causal, layout,
                                           algos, pass, reserved_gb, set, tp, cp, domains);
    const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
    sim::SweepControl control;
    control.jobs = given(jobs) ? int_arg(jobs, "--jobs") : hw;
    if (control.jobs < 1 || control.jobs > 1024)
      fail(Error{"--jobs", fmt::format("must be in [1, 1024], got {}", control.jobs)});
    json j;
    {
      py::gil_scoped_release nogil;
      const sim::SweepResult res = sim::run_sweep(spec, control);
      if (!res.failures.empty())
        throw cli::RuntimeFailure{fmt::format("{} simulations failed (a simulator bug), the first: {}",
                                              res.failures.size(), res.failures.front())};
      if (res.rows.empty())
        fail(Error{
            "--algos",
            fmt::format("no row: the planner refused every (configuration, algorithm, pass){}",
                        res.skip_reasons.empty() ? "" : "; the first reason: " + res.skip_reasons.begin()->first)});
      j = sim::sweep_json(spec, res)["rows"];
    }
    return to_py(j);
  });
}

// ---- frameworks ----

py::object frameworks_fn(const py::object& algo, const py::object& layout, bool causal, int ranks, int domains,
                         int tp) {
  return guarded([&] {
    if (!given(algo)) {
      json rows = json::array();
      for (const auto& r : sim::framework_table())
        rows.push_back({{"algo", r.algo},
                        {"layout", r.layout ? json(std::string(to_string(*r.layout))) : json(nullptr)},
                        {"megatron_cp_comm_type", r.megatron.empty() ? json(nullptr) : json(r.megatron)},
                        {"transformer_engine_cp_comm_type", r.te.empty() ? json(nullptr) : json(r.te)},
                        {"ring_flash_attention", r.ring_flash_attn.empty() ? json(nullptr) : json(r.ring_flash_attn)},
                        {"other", r.other_call.empty() ? json(nullptr) : json(r.other_call)},
                        {"note", r.note}});
      return to_py(rows);
    }
    ir::Layout l = ir::Layout::Contiguous;
    if (given(layout)) {
      auto v = ir::parse_layout(text_arg(layout, "--layout"));
      if (!v) fail(Error{"--layout", v.error().what});
      l = *v;
    }
    if (auto st = sched::check_ranks(ranks, domains); !st) fail(st.error());
    if (tp < 0 || tp > 1 << 20) fail(Error{"--tp", fmt::format("must be in [0, 1048576] (0: not named), got {}", tp)});
    ir::Workload w;
    w.layout = l;
    const auto req = sim::normalised_request({algo_arg(algo), w, ranks, domains});
    return to_py(sim::framework_json(
        sim::framework_settings(req.algo, req.workload.layout, causal, req.ranks, req.domains, tp)));
  });
}

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

/// advise, sweep, frameworks.
void def_search(py::module_& m) {
  m.def(
      "advise",
      [](const py::object& algos, const py::object& batch, const py::object& seq, const py::object& heads,
         const py::object& kv_heads, const py::object& head_dim, const py::object& dtype, const py::object& layout,
         const py::object& pass, const py::object& causal, const py::object& mask, const py::object& model,
         const py::object& topology, const py::object& uniform, const py::object& ranks, const py::object& bw_gbps,
         const py::object& tflops, const py::object& latency_us, const py::object& hbm_gbps, const py::object& domains,
         const py::object& reserved_gb, const py::object& jobs, const py::object& tp, const py::object& tp_search,
         const py::object& order, const py::object& layers, const py::object& tie, const py::object& runnable,
         const py::object& solve_ms, const py::object& solve_seed) {
        return advise_fn(algos, {batch, seq, heads, kv_heads, head_dim, dtype, layout, pass, causal, mask, model},
                         {topology, uniform, ranks, bw_gbps, tflops, latency_us, hbm_gbps, domains, reserved_gb}, jobs,
                         tp, tp_search, order, layers, tie, runnable, solve_ms, solve_seed);
      },
      py::kw_only(), py::arg("algos") = py::none(), CHARM_WORKLOAD_ARGS, CHARM_CLUSTER_ARGS,
      py::arg("jobs") = py::none(), py::arg("tp") = py::none(), py::arg("tp_search") = py::none(),
      py::arg("order") = py::none(), py::arg("layers") = py::none(), py::arg("tie") = py::none(),
      py::arg("runnable") = py::none(), py::arg("solve_ms") = py::none(), py::arg("solve_seed") = py::none(),
      "charm advise --json as a dict: 'best', 'candidates' (fastest first, each with its 'frameworks' and 'tie'), "
      "'refused'; tp_search=[1, 2, 4, 8] ranks CP x TP layouts (whole attention blocks' times), layers= scales times "
      "to a model, runnable=True keeps the rows a framework runs, model= reads a Hugging Face config.json.");
  m.def("sweep", &sweep_fn, py::kw_only(), py::arg("topology"), py::arg("batch") = py::none(),
        py::arg("seq") = py::none(), py::arg("heads") = py::none(), py::arg("head_dim") = py::none(),
        py::arg("kv_heads") = py::none(), py::arg("dtype") = "bf16", py::arg("causal") = false,
        py::arg("layout") = "contiguous", py::arg("algos") = py::none(), py::arg("pass_") = "fwd",
        py::arg("jobs") = py::none(), py::arg("reserved_gb") = 0.0, py::arg("set") = py::none(),
        py::arg("tp") = py::none(), py::arg("cp") = py::none(), py::arg("domains") = py::none(),
        "charm sweep: the rows of --json, one dict per (configuration, pass, algorithm), the same keys in each. "
        "Lists are Python lists (or one value, or a comma-separated str); set={'inter.bandwidth_gbps': [25, 50]} "
        "sweeps numbers of the topology JSON.");
  m.def("frameworks", &frameworks_fn, py::kw_only(), py::arg("algo") = py::none(), py::arg("layout") = py::none(),
        py::arg("causal") = false, py::arg("ranks") = 8, py::arg("domains") = 1, py::arg("tp") = 0,
        "The Megatron-LM / TransformerEngine / ring-flash-attention counterparts: the whole table, or one "
        "candidate's settings (the line charm advise prints; tp= names the TP size in Megatron-LM's arguments).");
}

}  // namespace
}  // namespace charm::python

PYBIND11_MODULE(_core, m) {
  using namespace charm::python;
  m.doc() = "CHARM+ planner and simulator: the charm command's library calls (see the charm package's docstring)";
  m.attr("__version__") = CHARM_VERSION;
  def_planning(m);
  def_simulation(m);
  def_search(m);
}
