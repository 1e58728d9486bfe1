// charm._core's advise, sweep and frameworks, and their bindings.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "python/module_support.hpp"
#include "sim/advise.hpp"
#include "sim/evaluate.hpp"
#include "sim/frameworks.hpp"
#include "sim/sweep.hpp"
#include "support/number_text.hpp"
#include "tools/app/advise.hpp"
#include "tools/app/sweep.hpp"
#include "tools/run_one.hpp"
#include "topologies/topology_json.hpp"

namespace charm::python {
namespace {

// ---- advise ----

py::object advise_fn(const py::object& algos, WorkloadArgs wa, ClusterArgs ca, const py::object& jobs,
                     const py::object& tp, const py::object& tp_search, const py::object& order,
                     const py::object& layers, const py::object& tie, const py::object& runnable,
                     const py::object& solve_ms, const py::object& solve_seed) {
  return guarded([&] {
    const sim::ChunkSolveOptions solve = solve_args(solve_ms, solve_seed);
    app::Cluster cf = ca.flags();
    if (given(tp)) cf.tp = int_arg(tp, "--tp");
    if (given(tp) && cf.tp < 1) fail(Error{"--tp", "must be at least 1"});
    if (given(order)) cf.order = text_arg(order, "--order");
    const auto topo = ca.get(cf);
    app::AdviseArgs f;
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
    const app::WorkloadSpec wf = wa.spec();
    if (const int n = cli::unwrap(wf.model_layers()); n > 0)
      f.layers = n;  // a model's config gives its layers unless layers= does
    if (given(layers)) f.layers = int_arg(layers, "--layers");
    if (given(tie)) f.tie_percent = real_arg(tie, "--tie");
    if (given(runnable)) f.runnable = bool_arg(runnable, "--runnable");
    f.chunks = solve;
    const app::AdviseRequest req = cli::unwrap(app::advise_request(cli::unwrap(wf.get()), cf, topo, f));
    std::optional<sim::Advice> adv;
    {
      py::gil_scoped_release nogil;
      adv = cli::unwrap_run(app::run_advise(req, topo));
    }
    return to_py(app::advice_json(req, *adv, topo));
  });
}

// ---- sweep ----

/// A workload list, read as the command reads its flag (app::parse_list: ranges, the cap on values).
std::vector<std::int64_t> size_list(const py::object& o, const std::string& flag) {
  std::string text;
  for (const auto& item : list_items(o, flag, /*sizes=*/true)) text += (text.empty() ? "" : ",") + item;
  return cli::unwrap(app::parse_list(text, flag));
}

/// set={'inter.bandwidth_gbps': [25, 50]}: each entry as the command's --set FIELD=LIST (a number, a list of
/// numbers, or the flag's own text like '25..100*2'), read by app::parse_sets with the command's caps.
std::vector<app::SetField> set_arg(const py::object& set) {
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
  return cli::unwrap(app::parse_sets(texts, points));
}

/// Topologies: a file, a dict, or a list of them (a str may list files comma-separated, as the flag does).
std::vector<app::SweepTopology> sweep_topology_args(const py::object& topology) {
  std::vector<py::object> args;
  if (py::isinstance<py::list>(topology) || py::isinstance<py::tuple>(topology)) {
    for (auto t : topology) args.push_back(py::reinterpret_borrow<py::object>(t));
  } else if (py::isinstance<py::str>(topology)) {
    for (const auto& f : charm::split_list(topology.cast<std::string>())) args.emplace_back(py::str(f));
  } else {
    args.push_back(topology);
  }
  if (args.empty()) fail(Error{"--topology", "names no topology"});
  std::vector<app::SweepTopology> docs;
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

/// The sweep's spec from its arguments, checked as charm sweep checks its flags (tools/app/sweep.hpp).
sim::SweepSpec sweep_spec(const py::object& topology, const py::object& batch, const py::object& seq,
                          const py::object& heads, const py::object& head_dim, const py::object& kv_heads,
                          const py::object& dtype, bool causal, const py::object& layout, const py::object& algos,
                          const std::string& pass, double reserved_gb, const py::object& set, const py::object& tp,
                          const py::object& cp, const py::object& domains) {
  const std::vector<app::SetField> sets = set_arg(set);
  const std::vector<app::SweepTopology> docs = sweep_topology_args(topology);
  sim::SweepSpec spec = cli::unwrap(app::sweep_topologies(docs, sets));
  for (const auto& w : spec.warnings) cli::print_warning(w);
  app::SweepLists lists;
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
  cli::unwrap(app::set_sweep_lists(spec, lists));
  std::vector<std::string> names;
  for (const auto& d : docs) names.push_back(d.name);
  // The configuration cap, and each (topology, algorithm, pass, layout, mask)'s simulation must fit.
  cli::unwrap(app::check_sweep_fits(spec, names, cli::memory_budget("")));
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
    const auto req = sched::normalised({algo_arg(algo), w, ranks, domains});
    return to_py(sim::framework_json(
        sim::framework_settings(req.algo, req.workload.layout, causal, req.ranks, req.domains, tp)));
  });
}

}  // namespace

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

}  // namespace charm::python
