// charm simulate | compare | topo — the simulator's command line.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/formulas.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"
#include "tools/cli_common.hpp"
#include "tools/plan_flags.hpp"
#include "topologies/topology_json.hpp"

namespace charm::cli {
namespace {

using nlohmann::json;

/// Where the cluster comes from: a topology file, or the uniform contention-free model.
struct ClusterFlags {
  std::string topology;
  bool uniform = false;
  int ranks = 8;
  int domains = 0;  // 0: from the topology (or 1 for --uniform)
  double bw_gbps = 0, tflops = 0, latency_us = 0, hbm_gbps = 0;

  std::vector<CLI::Option*> uniform_only;  // flags that describe the --uniform cluster and nothing else

  void add(CLI::App& app) {
    app.add_option("--topology,-t", topology, "topology JSON file (see docs/topology.md, presets in topologies/)");
    app.add_flag("--uniform", uniform, "contention-free fully connected cluster (needs --ranks, --bw-gbps, --tflops)");
    uniform_only = {
        app.add_option("--ranks,-n", ranks, "ranks of the --uniform cluster")->capture_default_str(),
        app.add_option("--bw-gbps", bw_gbps, "--uniform: link bandwidth in GB/s"),
        app.add_option("--tflops", tflops, "--uniform: peak TFLOP/s per GPU"),
        app.add_option("--latency-us", latency_us, "--uniform: per-message latency in us")->capture_default_str(),
        app.add_option("--hbm-gbps", hbm_gbps, "--uniform: HBM bandwidth for merges (default: merges are free)")};
    app.add_option("--domains,-d", domains, "domains for charm (default: from the topology's hierarchy; 1 for --uniform)");
  }
  [[nodiscard]] topo::Topology get() const {
    if (uniform == !topology.empty()) fail(Error{"--topology", "give exactly one of --topology FILE and --uniform"});
    if (domains < 0) fail(Error{"--domains", fmt::format("must be >= 1 (or omitted: from the topology), got {}", domains)});
    // A what-if flag that the topology file would silently override is refused:
    // the answer would be the file's, not the one asked for.
    if (!uniform)
      for (const CLI::Option* o : uniform_only)
        if (o->count() > 0)
          fail(Error{o->get_name(), "describes the --uniform cluster only; with --topology the file's numbers apply "
                                    "(edit a copy of the file to ask what if)"});
    if (!uniform) return unwrap(topo::load_topology(topology));
    if (ranks < 1 || ranks > (1 << 16)) fail(Error{"--ranks", fmt::format("must be in [1, 65536], got {}", ranks)});
    // CLI11 reads "nan" and "inf" as doubles; neither is a bandwidth.
    if (!(bw_gbps > 0) || !std::isfinite(bw_gbps))
      fail(Error{"--bw-gbps", fmt::format("--uniform needs a finite --bw-gbps > 0, got {}", bw_gbps)});
    if (!(tflops > 0) || !std::isfinite(tflops))
      fail(Error{"--tflops", fmt::format("--uniform needs a finite --tflops > 0, got {}", tflops)});
    if (!(latency_us >= 0) || !std::isfinite(latency_us))
      fail(Error{"--latency-us", fmt::format("must be a finite number >= 0, got {}", latency_us)});
    if (!(hbm_gbps >= 0) || !std::isfinite(hbm_gbps))
      fail(Error{"--hbm-gbps", fmt::format("must be a finite number >= 0, got {}", hbm_gbps)});
    return topo::make_uniform(ranks, bw_gbps, tflops, latency_us, hbm_gbps);
  }
  [[nodiscard]] int domains_for(const topo::Topology& t) const {
    if (domains > 0) return domains;
    return uniform ? 1 : sim::default_domains(t);
  }
};

json workload_json(const ir::Workload& w) {
  return {{"batch", w.batch}, {"seq", w.seq}, {"heads", w.heads}, {"kv_heads", w.kv_heads}, {"head_dim", w.head_dim},
          {"dtype", std::string(to_string(w.dtype))}, {"causal", w.causal}, {"layout", std::string(to_string(w.layout))}};
}

/// One algorithm end to end (sim/evaluate.hpp); a planner refusal is the user's (exit 2), a simulator failure is not (exit 3).
using Run = sim::Evaluation;
Run run_one(const std::string& algo, const ir::Workload& w, const topo::Topology& t, int domains, int ranks) {
  ir::Plan plan = unwrap(sched::make_plan(sim::normalised_request({algo, w, ranks, domains})));
  auto r = sim::evaluate_plan(std::move(plan), t);
  if (!r) throw RuntimeFailure{r.error().message()};
  return std::move(r).value();
}

json formula_json(double t_s, double o_s) { return {{"time_ms", t_s * 1e3}, {"exposed_comm_ms", o_s * 1e3}}; }

void register_simulate(CLI::App& app) {
  struct Opts {
    PlanFlags plan;
    ClusterFlags cluster;
    std::string trace;
    bool json_out = false, links = false;
    std::size_t path_limit = 64;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("simulate", "simulate one algorithm on a topology (or --uniform) and report time, overlap, memory");
  o->plan.add(*sub, /*with_ranks=*/false);
  o->cluster.add(*sub);
  sub->add_option("--trace", o->trace, "write a Chrome trace (open in Perfetto / chrome://tracing)");
  sub->add_flag("--json", o->json_out, "JSON output");
  sub->add_flag("--links", o->links, "list per-link utilisation in the text output");
  sub->add_option("--path-limit", o->path_limit, "most critical-path ops to report")->capture_default_str();
  sub->callback([o] {
    check_output_path(o->trace, "--trace");
    const auto topo = o->cluster.get();
    const ir::Workload w = o->plan.workload.get();
    const int ranks = o->cluster.uniform ? o->cluster.ranks : topo.num_gpus();
    const int domains = o->cluster.domains_for(topo);
    const Run r = run_one(o->plan.algo, w, topo, domains, ranks);
    const auto& s = r.summary;
    if (!o->trace.empty()) write_file_atomic(o->trace, sim::chrome_trace(r.plan, r.result).dump() + "\n");
    const auto model = sim::compute_model_for(topo, r.plan.workload);
    const double ccr = r.formula.ccr;
    std::vector<ir::Bytes> peaks;
    for (const auto& rk : r.result.ranks) peaks.push_back(rk.peak_mem_bytes);
    if (o->json_out) {
      json j = {{"schema", 1},
                {"algo", o->plan.algo},
                {"pass", std::string(to_string(w.pass))},
                {"topology", topo.name},
                {"ranks", ranks},
                {"domains", domains},
                {"workload", workload_json(r.plan.workload)},
                {"time_ms", s.time_s * 1e3},
                {"exposed_comm_ms", s.exposed_comm_s * 1e3},
                {"exposed_comm_per_rank_ms", {{"mean", s.exposed_comm_mean_s * 1e3}, {"max", s.exposed_comm_max_s * 1e3}}},
                {"idle_ms", {{"mean", s.idle_mean_s * 1e3}, {"max", s.idle_max_s * 1e3}}},
                {"compute_busy_ms", {{"mean", s.busy_mean_s * 1e3}}},
                {"ccr", ccr},
                {"peak_mem_bytes", s.peak_mem_bytes},
                {"peak_mem_per_rank_bytes", peaks},
                {"critical_path", sim::critical_path_json(r.plan, r.result, o->path_limit)},
                {"critical_path_length", r.result.critical_path.size()},
                {"links", sim::links_json(topo, r.result)},
                {"ops", r.plan.size()},
                {"events", r.result.events}};
      if (r.formula.available) {
        j["formula"] = formula_json(r.formula.time_s, r.formula.exposed_s);
        j["formula"]["basis"] = o->cluster.uniform ? "uniform" : "slowest ring hop as a uniform link";
        j["formula"]["applies"] = r.formula.applies;
        if (!r.formula.applies) j["formula"]["why_not"] = r.formula.why_not;
        j["formula_paper"] = formula_json(r.formula.paper_time_s, r.formula.paper_exposed_s);
      }
      std::cout << j.dump(1) << "\n";
      return;
    }
    std::cout << fmt::format("# charm simulate: {} {} on {} ({} ranks, {} domains)\n", o->plan.algo, to_string(w.pass), topo.name, ranks, domains);
    std::cout << fmt::format("# workload: B={} S={} H={}/{} D={} {} {}{}\n", w.batch, w.seq, w.heads, w.kv_heads, w.head_dim,
                             to_string(w.dtype), to_string(r.plan.workload.layout), w.causal ? " causal" : "");
    std::cout << fmt::format("{:<28}{:>12.3f} ms\n", "time", s.time_s * 1e3);
    std::cout << fmt::format("{:<28}{:>12.3f} ms  (per rank mean {:.3f}, max {:.3f})\n", "exposed communication", s.exposed_comm_s * 1e3,
                             s.exposed_comm_mean_s * 1e3, s.exposed_comm_max_s * 1e3);
    std::cout << fmt::format("{:<28}{:>12.3f} ms  (max {:.3f})\n", "compute idle (mean)", s.idle_mean_s * 1e3, s.idle_max_s * 1e3);
    std::cout << fmt::format("{:<28}{:>12.3f} ms\n", "compute busy (mean)", s.busy_mean_s * 1e3);
    std::cout << fmt::format("{:<28}{:>12.3f}\n", "CCR (Eq. 7)", ccr);
    std::cout << fmt::format("{:<28}{:>12.1f} MiB\n", "peak buffer memory", double(s.peak_mem_bytes) / (1 << 20));
    if (r.formula.available) {
      std::cout << fmt::format("{:<28}{:>12.3f} ms  exposed {:.3f} ms  ({})\n", "formula (realised)", r.formula.time_s * 1e3,
                               r.formula.exposed_s * 1e3, o->cluster.uniform ? "uniform" : "slowest ring hop");
      std::cout << fmt::format("{:<28}{:>12.3f} ms  exposed {:.3f} ms\n", "formula (paper)", r.formula.paper_time_s * 1e3,
                               r.formula.paper_exposed_s * 1e3);
      if (!r.formula.applies) std::cout << fmt::format("{:<28}does not describe this run: {}\n", "formula", r.formula.why_not);
    }
    std::cout << fmt::format("critical path: {} ops, ending at rank {}\n", r.result.critical_path.size(), r.result.last_rank);
    if (o->links) {
      std::cout << fmt::format("# {:<32}{:>10}{:>12}{:>10}{:>8}\n", "link", "GB/s", "bytes", "util", "flows");
      for (const auto& l : sim::links_json(topo, r.result))
        std::cout << fmt::format("  {:<32}{:>10.1f}{:>12.3g}{:>10.3f}{:>8}\n", l["link"].get<std::string>(), l["bandwidth_gbps"].get<double>(),
                                 l["bytes"].get<double>(), l["utilisation"].get<double>(), l["max_flows"].get<int>());
    }
    if (!o->trace.empty()) std::cout << fmt::format("wrote {}\n", o->trace);
    (void)model;
  });
}

void register_compare(CLI::App& app) {
  struct Opts {
    WorkloadFlags workload;
    ClusterFlags cluster;
    std::string algos;
    bool json_out = false;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("compare", "simulate every algorithm side by side, with speedup over ring");
  o->workload.add(*sub);
  o->cluster.add(*sub);
  sub->add_option("--algos", o->algos, "comma-separated algorithms (default: all)");
  sub->add_flag("--json", o->json_out, "JSON output");
  sub->callback([o, sub] {
    const auto topo = o->cluster.get();
    ir::Workload w = o->workload.get();
    if (sub->count("--pass") == 0) w.pass = ir::PassKind::Both;  // compare shows fwd and bwd unless told otherwise
    const int ranks = o->cluster.uniform ? o->cluster.ranks : topo.num_gpus();
    const int domains = o->cluster.domains_for(topo);
    auto algos = o->algos.empty() ? sched::algorithm_names() : split_list(o->algos);
    for (const auto& a : algos) {
      const auto& names = sched::algorithm_names();
      if (std::find(names.begin(), names.end(), a) == names.end())
        fail(Error{"--algos", fmt::format("unknown algorithm '{}'", a)});
    }
    std::vector<ir::PassKind> passes;
    if (w.pass != ir::PassKind::Bwd) passes.push_back(ir::PassKind::Fwd);
    if (w.pass != ir::PassKind::Fwd) passes.push_back(ir::PassKind::Bwd);
    struct Row {
      std::string algo, pass, note;
      bool ok = false;
      sim::Summary s;
      sim::ClosedForm f;
    };
    std::vector<Row> rows;
    for (auto p : passes) {
      ir::Workload wp = w;
      wp.pass = p;
      for (const auto& a : algos) {
        Row row{a, std::string(to_string(p)), {}, false, {}, {}};
        const sched::PlanRequest req = sim::normalised_request({a, wp, ranks, domains});
        if (auto st = sched::check_request(req); !st) {
          row.note = st.error().message();
        } else {
          Run r = run_one(a, wp, topo, domains, ranks);
          row.ok = true;
          row.s = r.summary;
          row.f = r.formula;
        }
        rows.push_back(std::move(row));
      }
    }
    auto ring_time = [&](const std::string& pass) {
      for (const auto& r : rows)
        if (r.ok && r.algo == "ring" && r.pass == pass) return r.s.time_s;
      return 0.0;
    };
    if (o->json_out) {
      json res = json::array();
      for (const auto& r : rows) {
        json j = {{"algo", r.algo}, {"pass", r.pass}};
        if (!r.ok) {
          j["error"] = r.note;
        } else {
          const double rt = ring_time(r.pass);
          j["time_ms"] = r.s.time_s * 1e3;
          j["exposed_comm_ms"] = r.s.exposed_comm_s * 1e3;
          j["idle_ms"] = {{"mean", r.s.idle_mean_s * 1e3}, {"max", r.s.idle_max_s * 1e3}};
          j["speedup_vs_ring"] = rt > 0 ? json(rt / r.s.time_s) : json(nullptr);
          j["peak_mem_bytes"] = r.s.peak_mem_bytes;
          j["ccr"] = r.f.ccr;
          if (r.f.available) j["formula"] = formula_json(r.f.time_s, r.f.exposed_s);
        }
        res.push_back(j);
      }
      json j = {{"schema", 1}, {"topology", {{"name", topo.name}, {"gpus", ranks}, {"domains", domains}}},
                {"workload", workload_json(w)}, {"results", res}};
      std::cout << j.dump(1) << "\n";
      return;
    }
    std::cout << fmt::format("# charm compare on {} ({} ranks, {} domains)\n", topo.name, ranks, domains);
    std::cout << fmt::format("# workload: B={} S={} H={}/{} D={} {} {}{}\n", w.batch, w.seq, w.heads, w.kv_heads, w.head_dim,
                             to_string(w.dtype), to_string(w.layout), w.causal ? " causal" : "");
    std::cout << fmt::format("# {:>12} {:>5} {:>12} {:>12} {:>12} {:>12} {:>10}\n", "algo", "pass", "time", "exposed", "idle(mean)",
                             "peak mem", "speedup");
    std::cout << fmt::format("# {:>12} {:>5} {:>12} {:>12} {:>12} {:>12} {:>10}\n", "", "", "(ms)", "(ms)", "(ms)", "(MiB)", "(x ring)");
    std::string best;
    double best_speed = 0;
    for (const auto& r : rows) {
      if (!r.ok) {
        std::cout << fmt::format("  {:>12} {:>5}   n/a: {}\n", r.algo, r.pass, r.note);
        continue;
      }
      const double rt = ring_time(r.pass);
      const double sp = rt > 0 ? rt / r.s.time_s : 0;
      if (sp > best_speed) {
        best_speed = sp;
        best = r.algo + " " + r.pass;
      }
      std::cout << fmt::format("  {:>12} {:>5} {:>12.3f} {:>12.3f} {:>12.3f} {:>12.1f} {:>10}\n", r.algo, r.pass, r.s.time_s * 1e3,
                               r.s.exposed_comm_s * 1e3, r.s.idle_mean_s * 1e3, double(r.s.peak_mem_bytes) / (1 << 20),
                               rt > 0 ? fmt::format("{:.2f}", sp) : "-");
    }
    if (!best.empty()) std::cout << fmt::format("# best: {} ({:.2f}x ring)\n", best, best_speed);
  });
}

/// A GPU named by its index or its vertex name, for --route.
int gpu_arg(const topo::Topology& t, const std::string& s, const std::string& pair) {
  for (int g = 0; g < t.num_gpus(); ++g)
    if (t.vertex_names[std::size_t(g)] == s) return g;
  std::size_t used = 0;
  int g = -1;
  try {
    g = std::stoi(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != s.size())
    fail(Error{"--route", fmt::format("'{}': '{}' is neither a GPU index nor a GPU name", pair, s)});
  if (g < 0 || g >= t.num_gpus()) fail(Error{"--route", fmt::format("'{}': GPU {} is not in [0, {})", pair, g, t.num_gpus())});
  return g;
}

std::string route_path(const topo::Topology& t, int s, int d) {
  std::string out = t.vertex_names[std::size_t(s)];
  for (auto ch : t.route(s, d)) out += " -> " + t.vertex_names[std::size_t(t.channel_to(ch))];
  return out;
}

json route_json(const topo::Topology& t, int s, int d) {
  json hops = json::array();
  for (auto ch : t.route(s, d)) hops.push_back(t.channel_name(ch));
  return {{"src", s}, {"dst", d}, {"hops", hops}, {"kind", std::string(to_string(t.route_kind(s, d)))},
          {"fixed", t.route_overridden(s, d)}, {"bandwidth_gbps", t.route_bandwidth_gbps(s, d)}, {"latency_us", t.route_latency_us(s, d)}};
}

/// One pair, hop by hop: each channel's ends, kind, bandwidth, latency and sharing.
void print_route(const topo::Topology& t, int s, int d) {
  std::cout << fmt::format("route {} -> {} ({} -> {}): {}, {} hops, {:g} GB/s, {:g} us{}\n", s, d, t.vertex_names[std::size_t(s)],
                           t.vertex_names[std::size_t(d)], to_string(t.route_kind(s, d)), t.route(s, d).size(),
                           t.route_bandwidth_gbps(s, d), t.route_latency_us(s, d), t.route_overridden(s, d) ? ", fixed by the file" : "");
  for (auto ch : t.route(s, d)) {
    const auto& l = t.channel_link(ch);
    std::cout << fmt::format("  {:<36} {:<7} {:>9g} GB/s {:>7g} us  {}\n", t.channel_name(ch), to_string(l.kind), l.bandwidth_gbps,
                             l.latency_us, l.sharing == topo::Sharing::Shared ? "shared" : "dedicated");
  }
}

/// Every pair, grouped by transport and shape (the kinds hop by hop, bandwidth,
/// latency): one line per group, an example and the first pairs, so that a
/// cluster of thousands of pairs still reads in a screen.
void print_route_groups(const topo::Topology& t) {
  struct Group {
    std::string key, head, example;
    std::vector<std::pair<int, int>> pairs;
    topo::LinkKind kind;
  };
  std::vector<Group> groups;
  std::map<std::string, std::size_t> index;
  for (int s = 0; s < t.num_gpus(); ++s)
    for (int d = 0; d < t.num_gpus(); ++d) {
      if (s == d) continue;
      std::string kinds;  // a file without kinds has nothing to list
      if (t.route_kind(s, d) != topo::LinkKind::Unspecified)
        for (auto ch : t.route(s, d)) kinds += fmt::format("{}{}", kinds.empty() ? " (" : "-", to_string(t.channel_link(ch).kind));
      if (!kinds.empty()) kinds += ")";
      const std::string head = fmt::format("{} hops{}, {:g} GB/s, {:g} us{}", t.route(s, d).size(), kinds, t.route_bandwidth_gbps(s, d),
                                           t.route_latency_us(s, d), t.route_overridden(s, d) ? ", fixed by the file" : "");
      const std::string key = fmt::format("{}|{}", int(t.route_kind(s, d)), head);
      auto [it, fresh] = index.emplace(key, groups.size());
      if (fresh) groups.push_back({key, head, route_path(t, s, d), {}, t.route_kind(s, d)});
      groups[it->second].pairs.emplace_back(s, d);
    }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.kind < b.kind; });
  std::cout << fmt::format("# routes of {}: {} GPUs, {} ordered pairs in {} groups (one pair hop by hop: --route SRC,DST)\n", t.name,
                           t.num_gpus(), t.num_gpus() * (t.num_gpus() - 1), groups.size());
  constexpr std::size_t kShown = 8;
  for (const auto& g : groups) {
    std::cout << fmt::format("{:<7} {:>6} pairs  {}\n", to_string(g.kind), g.pairs.size(), g.head);
    std::cout << fmt::format("          e.g. {}\n", g.example);
    std::string list;
    for (std::size_t i = 0; i < std::min(g.pairs.size(), kShown); ++i) list += fmt::format(" {}->{}", g.pairs[i].first, g.pairs[i].second);
    if (g.pairs.size() > kShown) list += fmt::format(" ... and {} more", g.pairs.size() - kShown);
    std::cout << fmt::format("          pairs:{}\n", list);
  }
}

void register_topo(CLI::App& app) {
  struct Opts {
    std::string file;
    bool routes = false, json_out = false;
    std::vector<std::string> pairs;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand("topo", "load a topology, check it, and print its summary as JSON, or its routes");
  sub->add_option("file", o->file, "topology JSON file")->required();
  sub->add_flag("--routes", o->routes, "list the routes of every GPU pair, grouped by transport (JSON with --json)");
  sub->add_option("--route", o->pairs, "show one pair's route hop by hop: SRC,DST as GPU indices or names (repeatable)")
      ->allow_extra_args(false);
  sub->add_flag("--json", o->json_out, "JSON output: the summary, with the routes asked for");
  sub->callback([o] {
    const auto t = unwrap(topo::load_topology(o->file));
    std::vector<std::pair<int, int>> pairs;
    for (const auto& p : o->pairs) {
      const auto parts = split_list(p);
      if (parts.size() != 2) fail(Error{"--route", fmt::format("'{}': expected SRC,DST", p)});
      const int s = gpu_arg(t, parts[0], p), d = gpu_arg(t, parts[1], p);
      if (s == d) fail(Error{"--route", fmt::format("'{}': a route joins two different GPUs", p)});
      pairs.emplace_back(s, d);
    }
    if (o->json_out || (!o->routes && pairs.empty())) {
      auto j = topo::topology_summary(t);
      if (o->routes || !pairs.empty()) {
        json routes = json::array();
        if (o->routes) {
          for (int s = 0; s < t.num_gpus(); ++s)
            for (int d = 0; d < t.num_gpus(); ++d)
              if (s != d) routes.push_back(route_json(t, s, d));
        } else {
          for (auto [s, d] : pairs) routes.push_back(route_json(t, s, d));
        }
        j["routes"] = routes;
      }
      std::cout << j.dump(1) << "\n";
      return;
    }
    if (o->routes) print_route_groups(t);
    for (auto [s, d] : pairs) print_route(t, s, d);
  });
}

const Registrar r1{register_simulate};
const Registrar r2{register_compare};
const Registrar r3{register_topo};

} // namespace
} // namespace charm::cli
