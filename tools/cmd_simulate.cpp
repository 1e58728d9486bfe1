// charm simulate | compare | topo — the simulator's command line.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/advise.hpp"
#include "sim/evaluate.hpp"
#include "sim/explain.hpp"
#include "sim/fair_share_network.hpp"
#include "sim/formulas.hpp"
#include "sim/frameworks.hpp"
#include "sim/report.hpp"
#include "sim/run_json.hpp"
#include "sim/simulator.hpp"
#include "tools/app/advise.hpp"
#include "tools/cli_common.hpp"
#include "tools/cluster_flags.hpp"
#include "tools/plan_flags.hpp"
#include "tools/run_one.hpp"
#include "topologies/topology_json.hpp"

namespace charm::cli {
namespace {

using nlohmann::json;

using Run = sim::Evaluation;

/// One warning line on stderr when the buffers do not fit (the answer itself still goes to stdout).
void warn_if_not_fits(const sim::MemoryVerdict& m, const std::string& what = "") {
  if (m.known && !m.fits) print_warning(fmt::format("{}{}", what.empty() ? "" : what + ": ", m.line()));
}

/// simulate's flags beyond the plan's and the cluster's.
struct SimulateOpts {
  PlanFlags plan;
  ClusterFlags cluster;
  std::string trace;
  bool json_out = false, links = false;
  std::size_t path_limit = 64;
  std::string symmetry = "auto";
};

/// A simulation and the topology it ran on.
struct Simulated {
  topo::Topology topo;
  Run run;
  std::int64_t asked_kv_heads = 0;  // the workload's KV heads before the planner repeats any (0: a plan file)
};

/// The flags to a simulation: a plan file (placed as the flags or the file say) or an algorithm.
Simulated run_simulate(SimulateOpts& o, const CLI::App& sub) {
  const SymmetryUse use = parse_enum(o.symmetry, kSymmetryUseNames).value_or(SymmetryUse::Auto);
  if (use == SymmetryUse::On && o.plan.from_file())
    fail(Error{"--symmetry", "a plan file holds every rank's ops; --symmetry applies to --algo runs"});
  check_command_files({{{"--topology", o.cluster.topology}, {"--plan", o.plan.plan_file}}, {{"--trace", o.trace}}, {}});
  // A saved or hand-edited plan fixes algorithm, ranks, domains and workload.
  std::optional<ir::Plan> file_plan;
  if (o.plan.from_file()) {
    o.plan.max_memory = o.cluster.max_memory;  // simulate's --max-memory is the cluster flags'
    file_plan = o.plan.make();
    if (o.cluster.domains > 0) fail(Error{"--domains", "the plan file fixes the domains; drop --domains or --plan"});
    if (o.cluster.uniform && sub.count("--ranks") == 0) o.cluster.ranks = file_plan->ranks;
  }
  const auto topo = o.cluster.get();
  if (file_plan && file_plan->groups == 1 && file_plan->gpus.empty() && o.cluster.gpus.empty() &&
      !unwrap(o.cluster.layout_for(topo)) && file_plan->ranks < topo.num_gpus())
    print_warning(fmt::format("the plan does not fill {}: {} (nothing else runs on them)", topo.name,
                              sim::placement_text(file_plan->ranks, topo.num_gpus())));
  const ir::Workload w = file_plan ? ir::Workload{} : unwrap(o.plan.workload.get());
  if (!file_plan) unwrap(o.plan.workload.check_layout_for(o.plan.algo, w));
  Run r = run_simulation(std::move(file_plan), o.plan.algo, w, o.cluster, topo, use, o.plan.workload.solve_options());
  return {topo, std::move(r), w.kv_heads};
}

/// The text report's head: what ran where, and on which class of ranks.
void print_simulation_head(std::ostream& os, const Run& r, const topo::Topology& topo, const std::string& plan_file,
                           std::int64_t asked_kv_heads) {
  const ir::Workload& w = r.plan.workload;
  const std::string ranks_text =
      r.plan.groups == 1 ? counted(r.plan.ranks, "rank")
                         : fmt::format("{} CP groups of {}", r.plan.groups, counted(r.plan.group_ranks(), "rank"));
  os << fmt::format("# charm simulate: {} {} on {} ({}, {}){}\n", r.plan.algo, to_string(w.pass), topo.name, ranks_text,
                    counted(r.plan.domains, "domain"), plan_file.empty() ? "" : " from " + plan_file);
  os << fmt::format("# workload: B={} S={} H={}/{} D={} {} {}{}\n", w.batch, w.seq, w.heads, w.kv_heads, w.head_dim,
                    to_string(w.dtype), to_string(w.layout), w.causal ? " " + w.mask_text() : "");
  os << fmt::format("# scope: {}\n", sim::scope_text(w.pass, 1, r.tp_block ? r.tp_block->tp : 0));
  os << fmt::format("# model: {}\n", sim::model_text(topo, w));
  if (r.tp_block) os << fmt::format("# {}\n", sim::gemm_line(topo.gpu));
  if (asked_kv_heads > 0 && w.kv_heads > asked_kv_heads)
    os << fmt::format("# kv heads: {} repeated to {} ({}x each), one per rank of {}'s all-to-all, as DeepSpeed-Ulysses "
                      "and Megatron-LM do; the copies are in the traffic and the memory\n",
                      asked_kv_heads, w.kv_heads, w.kv_heads / asked_kv_heads, r.plan.algo);
  if (r.plan.ranks < topo.num_gpus() || r.plan.groups > 1)
    os << fmt::format("# placement: {}\n", sim::placement_text(r.plan, topo.num_gpus()));
  if (r.chunks) os << fmt::format("# chunks: {}\n", r.chunks->line());
  if (r.plan.symmetry.active())
    os << fmt::format("# simulated one class of {} rank{} standing for all {} classes ({} symmetry of plan and "
                      "topology: {} of {} ops; --symmetry off simulates every rank)\n",
                      r.plan.symmetry.block, r.plan.symmetry.block == 1 ? "" : "s",
                      r.plan.symmetry.elements(r.plan.ranks), to_string(r.plan.symmetry.kind), r.plan.size(),
                      sim::full_ops(r.plan));
}

/// The figures: time, overlap, load, memory, the closed forms, the bottleneck and the critical path.
void print_simulation_figures(std::ostream& os, const Run& r, const sim::Explanation& ex, const sim::MemoryVerdict& mem,
                              bool uniform) {
  const auto& s = r.summary;
  os << fmt::format("{:<28}{:>12.3f} ms\n", "time", s.time_s * 1e3);
  if (r.tp_block)
    os << fmt::format("{:<28}{:>12.3f} ms  ({}; core attention {:.3f} ms)\n", "  of which tensor parallel",
                      r.tp_block->total_s() * 1e3, r.tp_block->line(), (s.time_s - r.tp_block->total_s()) * 1e3);
  os << fmt::format("{:<28}{:>12.3f} ms  (per rank mean {:.3f}, max {:.3f})\n", "exposed communication",
                    s.exposed_comm_s * 1e3, s.exposed_comm_mean_s * 1e3, s.exposed_comm_max_s * 1e3);
  os << fmt::format("{:<28}{:>12.3f} ms  (max {:.3f})\n", "compute idle (mean)", s.idle_mean_s * 1e3,
                    s.idle_max_s * 1e3);
  os << fmt::format("{:<28}{:>12.3f} ms\n", "compute busy (mean)", s.busy_mean_s * 1e3);
  if (r.plan.workload.position_mask() && !r.plan.symmetry.active()) {
    const auto f = sim::flops_per_rank(r.plan);
    const double mx = *std::max_element(f.begin(), f.end()), mn = *std::min_element(f.begin(), f.end());
    const double mean = std::accumulate(f.begin(), f.end(), 0.0) / double(f.size());
    os << fmt::format("{:<28}{:>12.2f} max/mean  ({:.3g}-{:.3g} TFLOP of visible pairs per rank)\n", "mask imbalance",
                      mean > 0 ? mx / mean : 1.0, mn / 1e12, mx / 1e12);
  }
  os << fmt::format("{:<28}{:>12.3f} ms\n", "transfers in flight (mean)", s.comm_busy_mean_s * 1e3);
  os << fmt::format("{:<28}{:>12.3f}\n", "CCR (Eq. 7)", r.formula.ccr);
  os << fmt::format("{:<28}{:>12.1f} MiB  ({})\n", "peak buffer memory", double(s.peak_mem_bytes) / (1 << 20),
                    mem.line());
  if (r.formula.available) {
    os << fmt::format("{:<28}{:>12.3f} ms  exposed {:.3f} ms  ({})\n", "formula (realised)", r.formula.time_s * 1e3,
                      r.formula.exposed_s * 1e3, uniform ? "uniform" : "slowest ring hop");
    os << fmt::format("{:<28}{:>12.3f} ms  exposed {:.3f} ms\n", "formula (paper)", r.formula.paper_time_s * 1e3,
                      r.formula.paper_exposed_s * 1e3);
    if (!r.formula.applies) os << fmt::format("{:<28}does not describe this run: {}\n", "formula", r.formula.why_not);
  }
  os << fmt::format("{:<28}{}\n", "bottleneck", ex.bottleneck.line());
  // The path is core attention's: its shares are of the simulated makespan (a TP block is added after).
  os << fmt::format("critical path: {} ops, ending at rank {}: {}\n", r.result.critical_path.size(), r.result.last_rank,
                    sim::path_shares_text(ex.path, r.result.makespan_s));
  if (ex.first_op != ir::kNone) {
    auto at = [&](ir::OpId id) {
      return fmt::format("rank {} {} [{:.3f} - {:.3f} ms]", r.plan.op(id).rank, ir::op_label(r.plan, id),
                         r.result.start_s[std::size_t(id)] * 1e3, r.result.end_s[std::size_t(id)] * 1e3);
    };
    os << fmt::format("  first: {}\n  last:  {}\n", at(ex.first_op), at(ex.last_op));
  }
}

void print_links(std::ostream& os, const Run& r, const topo::Topology& topo) {
  os << fmt::format("# {:<32}{:>10}{:>12}{:>10}{:>8}\n", "link", "GB/s", "bytes", "util", "flows");
  for (const auto& l : sim::links_json(topo, r.result))
    os << fmt::format("  {:<32}{:>10.1f}{:>12.3g}{:>10.3f}{:>8}\n", l["link"].get<std::string>(),
                      l["bandwidth_gbps"].get<double>(), l["bytes"].get<double>(), l["utilisation"].get<double>(),
                      l["max_flows"].get<int>());
}

void register_simulate(CLI::App& app) {
  auto o = std::make_shared<SimulateOpts>();
  auto* sub = app.add_subcommand(
      "simulate", "simulate one algorithm on a topology (or --uniform) and report time, overlap, memory");
  o->plan.add(*sub, /*with_ranks=*/false, /*with_plan_file=*/true);
  o->cluster.add(*sub);
  sub->add_option("--trace", o->trace, "write a Chrome trace (open in Perfetto / chrome://tracing)");
  sub->add_flag("--json", o->json_out, "JSON output");
  sub->add_flag("--links", o->links, "list per-link utilisation in the text output");
  sub->add_option("--path-limit", o->path_limit, "most critical-path ops to report")->capture_default_str();
  sub->add_option("--symmetry", o->symmetry,
                  "simulate one class of ranks for all where the plan and the topology share a rank symmetry: auto "
                  "(for plans of 1M ops or more), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  sub->callback([o, sub] {
    const auto [topo, r, asked_kv_heads] = run_simulate(*o, *sub);
    if (!o->trace.empty()) write_file_atomic(o->trace, sim::chrome_trace(r.plan, r.result).dump() + "\n");
    const sim::Explanation ex = sim::explain(r.plan, r.result, topo);
    const sim::MemoryVerdict mem = sim::memory_verdict(r.summary.peak_mem_bytes, o->cluster.reserved_gb, topo.gpu);
    warn_if_not_fits(mem);
    if (o->json_out) {
      std::cout << sim::simulate_json(r, topo, ex, mem, o->cluster.uniform, o->path_limit).dump(1) << "\n";
      return;
    }
    print_simulation_head(std::cout, r, topo, o->plan.from_file() ? o->plan.plan_file : "", asked_kv_heads);
    print_simulation_figures(std::cout, r, ex, mem, o->cluster.uniform);
    if (o->links) print_links(std::cout, r, topo);
    if (!o->trace.empty()) std::cout << fmt::format("wrote {}\n", o->trace);
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
    const app::CompareRequest req = unwrap(app::compare_request(unwrap(o->workload.get()), o->cluster, topo, o->algos,
                                                                sub->count("--pass") > 0, sub->count("--layout") > 0));
    const std::vector<app::CompareRow> rows = cli::run_compare(req, topo);
    for (const auto& r : rows) warn_if_not_fits(r.m, r.algo + " " + r.pass);
    if (o->json_out)
      std::cout << app::compare_json(req, rows, topo).dump(1) << "\n";
    else
      app::print_compare(std::cout, req, rows, topo);
  });
}

void register_advise(CLI::App& app) {
  struct Opts {
    WorkloadFlags workload;
    ClusterFlags cluster;
    app::AdviseArgs advise;
    bool json_out = false;
    int top = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* sub = app.add_subcommand(
      "advise", "which algorithm, layout and domain split to run, ranked by fwd+bwd time, with memory and why");
  o->workload.add(*sub);
  o->cluster.add(*sub);
  // advise ranks fwd+bwd unless a pass is asked for; --layout restricts the candidates.
  sub->get_option("--pass")->description("rank by this pass alone: fwd | bwd (default: fwd+bwd)")->default_str("");
  sub->get_option("--layout")
      ->description("contiguous | zigzag | balanced: only this layout's candidates (default: contiguous and zigzag "
                    "under a causal mask, and balanced too with packed documents)")
      ->default_str("");
  sub->add_option("--algos", o->advise.algos, "comma-separated algorithms to consider (default: all)");
  sub->add_flag("--json", o->json_out, "JSON output");
  sub->add_option("--jobs,-j", o->advise.jobs, "simulations at once (default: the machine's cores)");
  sub->add_option("--top", o->top, "rows of the text table (default: all)");
  sub->add_option("--tp-search", o->advise.tp_search,
                  "comma-separated TP sizes: rank every CP x TP layout of the topology's GPUs (CP = GPUs / TP), all "
                  "CP groups at once on TP's share of the heads (--tp T alone: that one); the TP collectives are "
                  "not in the times");
  sub->add_option("--layers", o->advise.layers,
                  "times for a model of this many attention layers, one after another (default: one layer)");
  sub->add_option("--tie", o->advise.tie_percent,
                  "percent: candidates this close to the best are marked as ties, which the model cannot order "
                  "(default: 10, its error on ratios of times against measurements)");
  sub->add_flag("--runnable", o->advise.runnable,
                "only candidates some framework runs (Megatron-LM/TransformerEngine, ring-flash-attention, "
                "DeepSpeed-Ulysses)");
  sub->callback([o, sub] {
    if (o->top < 0) fail(Error{"--top", fmt::format("must be >= 1 (or 0 or omitted: all), got {}", o->top)});
    const auto topo = o->cluster.get();
    // A model's config gives its layer count unless --layers does.
    if (sub->count("--layers") == 0)
      if (const int layers = unwrap(o->workload.model_layers()); layers > 0) o->advise.layers = layers;
    o->advise.pass_given = sub->count("--pass") > 0;
    o->advise.layout_given = sub->count("--layout") > 0;
    if (sub->count("--jobs") > 0 && o->advise.jobs == 0)
      fail(Error{"--jobs", "must be in [1, 1024] (or omitted), got 0"});
    o->advise.chunks = o->workload.solve_options();
    const app::AdviseRequest req = unwrap(app::advise_request(unwrap(o->workload.get()), o->cluster, topo, o->advise));
    const sim::Advice adv = unwrap_run(app::run_advise(req, topo));
    for (const auto& c : adv.candidates) warn_if_not_fits(c.memory, c.label());
    if (o->json_out)
      std::cout << app::advice_json(req, adv, topo).dump(1) << "\n";
    else
      app::print_advice(std::cout, req, adv, topo, o->top);
  });
}

/// A GPU named by its index or its vertex name, for --route.
int gpu_arg(const topo::Topology& t, const std::string& s, const std::string& pair) {
  for (int g = 0; g < t.num_gpus(); ++g)
    if (t.vertex_names[std::size_t(g)] == s) return g;
  // A GPU index in the flags' grammar: decimal digits only.
  const auto index = check_number(s, NumberKind::Integer);
  if (!index) fail(Error{"--route", fmt::format("'{}': '{}' is neither a GPU index nor a GPU name", pair, s)});
  const int g = std::stoi(*index);
  if (g < 0 || g >= t.num_gpus())
    fail(Error{"--route", fmt::format("'{}': GPU {} is not in [0, {})", pair, g, t.num_gpus())});
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
  return {{"src", s},
          {"dst", d},
          {"hops", hops},
          {"kind", std::string(to_string(t.route_kind(s, d)))},
          {"fixed", t.route_overridden(s, d)},
          {"bandwidth_gbps", t.route_bandwidth_gbps(s, d)},
          {"flow_gbps", sim::route_flow_gbps(t, s, d)},
          {"latency_us", t.route_latency_us(s, d)}};
}

/// A route's rate: what one flow attains alone there (the simulator's), and the links' bandwidth where that is more.
std::string route_rate_text(const topo::Topology& t, int s, int d) {
  const double flow = sim::route_flow_gbps(t, s, d), wire = t.route_bandwidth_gbps(s, d);
  return flow < wire ? fmt::format("{:g} GB/s a flow (links {:g} GB/s)", flow, wire) : fmt::format("{:g} GB/s", flow);
}

/// One pair, hop by hop: each channel's ends, kind, bandwidth, latency and sharing.
void print_route(const topo::Topology& t, int s, int d) {
  std::cout << fmt::format("route {} -> {} ({} -> {}): {}, {} hops, {}, {:g} us{}\n", s, d,
                           t.vertex_names[std::size_t(s)], t.vertex_names[std::size_t(d)],
                           to_string(t.route_kind(s, d)), t.route(s, d).size(), route_rate_text(t, s, d),
                           t.route_latency_us(s, d), t.route_overridden(s, d) ? ", fixed by the file" : "");
  for (auto ch : t.route(s, d)) {
    const auto& l = t.channel_link(ch);
    std::string limits;
    if (l.per_flow_gbps > 0) limits += fmt::format(", {:g} GB/s per flow", l.per_flow_gbps);
    if (l.injection_gbps > 0) limits += fmt::format(", {:g} GB/s injection", l.injection_gbps);
    std::cout << fmt::format("  {:<36} {:<7} {:>9g} GB/s {:>7g} us  {}{}\n", t.channel_name(ch), to_string(l.kind),
                             l.bandwidth_gbps, l.latency_us,
                             l.sharing == topo::Sharing::Shared ? "shared" : "dedicated", limits);
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
        for (auto ch : t.route(s, d))
          kinds += fmt::format("{}{}", kinds.empty() ? " (" : "-", to_string(t.channel_link(ch).kind));
      if (!kinds.empty()) kinds += ")";
      const std::string head =
          fmt::format("{} hops{}, {}, {:g} us{}", t.route(s, d).size(), kinds, route_rate_text(t, s, d),
                      t.route_latency_us(s, d), t.route_overridden(s, d) ? ", fixed by the file" : "");
      const std::string key = fmt::format("{}|{}", int(t.route_kind(s, d)), head);
      auto [it, fresh] = index.emplace(key, groups.size());
      if (fresh) groups.push_back({key, head, route_path(t, s, d), {}, t.route_kind(s, d)});
      groups[it->second].pairs.emplace_back(s, d);
    }
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.kind < b.kind; });
  std::cout << fmt::format(
      "# routes of {}: {} GPUs, {} ordered pairs in {} groups (one pair hop by hop: --route SRC,DST)\n", t.name,
      t.num_gpus(), t.num_gpus() * (t.num_gpus() - 1), groups.size());
  constexpr std::size_t kShown = 8;
  for (const auto& g : groups) {
    std::cout << fmt::format("{:<7} {:>6} pairs  {}\n", to_string(g.kind), g.pairs.size(), g.head);
    std::cout << fmt::format("          e.g. {}\n", g.example);
    std::string list;
    for (std::size_t i = 0; i < std::min(g.pairs.size(), kShown); ++i)
      list += fmt::format(" {}->{}", g.pairs[i].first, g.pairs[i].second);
    if (g.pairs.size() > kShown) list += fmt::format(" ... and {} more", g.pairs.size() - kShown);
    std::cout << fmt::format("          pairs:{}\n", list);
  }
}

/// The most ordered pairs `topo --routes` describes: 1,024 GPUs in groups (about 1 s), 256 GPUs one by one in
/// JSON (1,024 took 23 s, 2.4 GB and printed 220 MB).
constexpr double kMaxRoutes = 1024.0 * 1023.0, kMaxJsonRoutes = 256.0 * 255.0;

/// `charm topo FILE`: what a person reads: the GPUs, the links grouped by what they are, and where the
/// model's values come from (the JSON summary has every number).
void print_topology_text(std::ostream& os, const topo::Topology& t) {
  const topo::GpuSpec& g = t.gpu;
  os << fmt::format("# charm topo: {}: {} GPUs, {} domains\n", t.name, t.num_gpus(), t.domains());
  os << fmt::format("# gpu: {}, {:g} TFLOP/s bf16 dense, {:g} GB, HBM {:g} GB/s, {} SMs; kernel {}\n", g.model,
                    g.tflops_bf16, g.memory_gb, g.hbm_gbps, g.sm_count,
                    g.kernel ? g.kernel->library + " (" + g.family + " tables)"
                             : fmt::format("efficiency {:.3g} fwd / {:.3g} bwd", g.efficiency_fwd, g.efficiency_bwd));
  std::map<std::string, int> groups;  // one line per kind of link, with how many there are
  for (const auto& l : t.links) {
    std::string limits;
    if (l.per_flow_gbps > 0) limits += fmt::format(", {:.4g} GB/s per flow", l.per_flow_gbps);
    if (l.injection_gbps > 0) limits += fmt::format(", {:.4g} GB/s per GPU", l.injection_gbps);
    ++groups[fmt::format("{} {:.4g} GB/s {} {:g} us{}", to_string(l.kind), l.bandwidth_gbps,
                         l.sharing == topo::Sharing::Shared ? "shared" : "dedicated", l.latency_us, limits)];
  }
  for (const auto& [text, n] : groups) os << fmt::format("# links: {} x {}\n", n, text);
  os << fmt::format("# stack: {}: step {:g} us, message {:g} us, update passes {:g}, overlap slowdown compute {:g} / "
                    "comm {:g}\n",
                    t.stack.preset, t.stack.step_us, t.stack.message_us, t.stack.update_passes,
                    t.stack.compute_slowdown, t.stack.comm_slowdown);
  os << fmt::format("# model: {}\n", t.sources.line());
  os << "# every number: charm topo FILE --json; routes: --routes, --route SRC,DST\n";
}

void register_topo(CLI::App& app) {
  struct Opts {
    std::string file;
    bool routes = false, json_out = false;
    std::vector<std::string> pairs;
  };
  auto o = std::make_shared<Opts>();
  auto* sub =
      app.add_subcommand("topo", "load a topology, check it, and print its summary (JSON with --json), or its routes");
  sub->add_option("file", o->file, "topology JSON file")->required();
  sub->add_flag("--routes", o->routes, "list the routes of every GPU pair, grouped by transport (JSON with --json)");
  sub->add_option("--route", o->pairs, "show one pair's route hop by hop: SRC,DST as GPU indices or names (repeatable)")
      ->allow_extra_args(false);
  sub->add_flag("--json", o->json_out, "JSON output: the summary, with the routes asked for");
  sub->callback([o] {
    const auto t = load_topology_file(o->file);
    // Every ordered pair is a route to find and describe: GPUs^2 of them (65,536 GPUs: 4.3e9, hours).
    const double max_routes = o->json_out ? kMaxJsonRoutes : kMaxRoutes;
    if (const double routes = double(t.num_gpus()) * double(t.num_gpus() - 1); o->routes && routes > max_routes)
      fail(Error{"--routes", fmt::format("{} has {} GPUs, {:.3g} ordered pairs: more than the {} routes --routes{} "
                                         "lists; show pairs with --route SRC,DST",
                                         o->file, t.num_gpus(), routes, max_routes, o->json_out ? " --json" : "")});
    std::vector<std::pair<int, int>> pairs;
    for (const auto& p : o->pairs) {
      const auto parts = split_list(p);
      if (parts.size() != 2) fail(Error{"--route", fmt::format("'{}': expected SRC,DST", p)});
      const int s = gpu_arg(t, parts[0], p), d = gpu_arg(t, parts[1], p);
      if (s == d) fail(Error{"--route", fmt::format("'{}': a route joins two different GPUs", p)});
      pairs.emplace_back(s, d);
    }
    if (!o->json_out && !o->routes && pairs.empty()) {
      print_topology_text(std::cout, t);
      return;
    }
    if (o->json_out) {
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

const Registrar simulate_registered{"simulate", register_simulate};
const Registrar compare_registered{"compare", register_compare};
const Registrar topo_registered{"topo", register_topo};
const Registrar advise_registered{"advise", register_advise};

}  // namespace
}  // namespace charm::cli
