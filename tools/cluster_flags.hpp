#pragma once
// Where the cluster comes from, for simulate, compare and advise: a topology
// file, or the uniform contention-free model; and what else each GPU holds.

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <optional>
#include <tuple>
#include <vector>

#include "scheduler/planners/layout.hpp"
#include "sim/evaluate.hpp"
#include "tools/cli_common.hpp"
#include "topologies/topology_json.hpp"

namespace charm::cli {

/// A topology file, loaded (its errors are the user's), with what the loader read past said on stderr.
inline topo::Topology load_topology_file(const std::string& path) {
  auto t = unwrap(topo::load_topology(path));
  for (const auto& w : t.warnings) std::cerr << "charm: warning: " << w << "\n";
  return t;
}

/// Where the cluster comes from: a topology file, or the uniform contention-free model.
struct ClusterFlags {
  std::string topology;
  bool uniform = false;
  int ranks = 8;
  int domains = 0;  // 0: from the topology (or 1 for --uniform)
  double bw_gbps = 0, tflops = 0, latency_us = 0, hbm_gbps = 0;

  double reserved_gb = 0;  // memory the rest of the model holds on each GPU

  std::vector<CLI::Option*> uniform_only;  // flags that describe the --uniform cluster and nothing else
  CLI::Option* domains_opt = nullptr;
  bool ranks_given = false;  // with --topology: one group on the topology's first `ranks` GPUs
  int cp = 0, tp = 0;        // a deployment's CP and TP sizes (0: not given)
  std::string gpus;          // --gpus: one group placed by hand, rank r on the r-th GPU listed
  std::string order = "tp-cp";

  void add(CLI::App& app) {
    app.add_option("--topology,-t", topology, "topology JSON file (see docs/topology.md, presets in topologies/)");
    app.add_flag("--uniform", uniform, "contention-free fully connected cluster (needs --ranks, --bw-gbps, --tflops)");
    app.add_option("--ranks,-n", ranks,
                   "ranks of the --uniform cluster; with --topology, one context-parallel group on the topology's "
                   "first N GPUs, the others idle (default: every GPU)")
        ->capture_default_str()
        ->each([this](const std::string&) { ranks_given = true; });
    uniform_only = {
        app.add_option("--bw-gbps", bw_gbps, "--uniform: link bandwidth in GB/s"),
        app.add_option("--tflops", tflops, "--uniform: peak TFLOP/s per GPU"),
        app.add_option("--latency-us", latency_us, "--uniform: per-message latency in us")->capture_default_str(),
        app.add_option("--hbm-gbps", hbm_gbps, "--uniform: HBM bandwidth for merges (default: merges are free)")};
    app.add_option("--cp", cp,
                   "with --topology: context-parallel group size of a deployment; every CP group of the layout runs "
                   "at once (default with --tp: the GPUs / TP)");
    app.add_option("--tp", tp, "with --topology: tensor-parallel size (splits the heads; DP is the rest of the GPUs)");
    app.add_option("--gpus", gpus,
                   "with --topology: one context-parallel group on these GPUs, rank r on the r-th listed (e.g. "
                   "0,2,4,6,8,10,12,14); the others idle");
    app.add_option("--order", order,
                   "GPU numbering of the layout: tp-cp (tensor-parallel peers adjacent, Megatron-LM's default) or "
                   "cp-tp (a CP group on consecutive GPUs)")
        ->capture_default_str();
    domains_opt =
        app.add_option("--domains,-d", domains,
                       "domains: charm's (the outer level of its cross-hardware pipeline) and usp's (its ring "
                       "degree; Ulysses runs over ranks / domains); the other algorithms ignore it (default: "
                       "from the topology's hierarchy; 1 for --uniform)");
    app.add_option("--reserved-gb", reserved_gb,
                   "GB per GPU the rest of the model already holds (weights, optimizer state, other activations), "
                   "added to the attention buffers for the fits verdict")
        ->capture_default_str();
    add_max_memory(app);
  }
  [[nodiscard]] topo::Topology get() const {
    if (uniform == !topology.empty()) fail(Error{"--topology", "give exactly one of --topology FILE and --uniform"});
    // 0 stands for "omitted" inside; given, it is a count like any other.
    if (domains < 0 || (domains == 0 && domains_opt != nullptr && domains_opt->count() > 0))
      fail(Error{"--domains", fmt::format("must be >= 1 (or omitted: from the topology), got {}", domains)});
    // A what-if flag that the topology file would silently override is refused:
    // the answer would be the file's, not the one asked for.
    if (!uniform)
      for (const CLI::Option* o : uniform_only)
        if (o->count() > 0)
          fail(Error{o->get_name(), "describes the --uniform cluster only; with --topology the file's numbers apply "
                                    "(edit a copy of the file to ask what if)"});
    if (!(reserved_gb >= 0) || !std::isfinite(reserved_gb) || reserved_gb > 1e4)
      fail(Error{"--reserved-gb", fmt::format("must be a number of GB in [0, 10000], got {}", reserved_gb)});
    if (!uniform) return load_topology_file(topology);
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
    // The plausible ranges of topology files: past them the simulator's times leave the finite doubles.
    const std::tuple<const char*, topo::Quantity, double> numbers[] = {
        {"--bw-gbps", topo::Quantity::Bandwidth, bw_gbps},
        {"--tflops", topo::Quantity::Tflops, tflops},
        {"--latency-us", topo::Quantity::Latency, latency_us},
        {"--hbm-gbps", topo::Quantity::Bandwidth, hbm_gbps}};
    for (const auto& [flag, q, x] : numbers) {
      if (q == topo::Quantity::Bandwidth && x == 0) continue;  // --hbm-gbps 0: merges are free
      if (const auto why = topo::implausible(q, x, flag); !why.empty()) fail(Error{flag, why});
    }
    return topo::make_uniform(ranks, bw_gbps, tflops, latency_us, hbm_gbps);
  }
  /// The deployment --cp / --tp describe on `t`, if either is given.
  [[nodiscard]] std::optional<sched::Layout> layout_for(const topo::Topology& t) const {
    if (cp == 0 && tp == 0) {
      if (order != "tp-cp") fail(Error{"--order", "orders the axes of a --cp / --tp layout; give one of them"});
      return std::nullopt;
    }
    if (uniform) fail(Error{cp != 0 ? "--cp" : "--tp", "places groups on a --topology; --uniform has no layout"});
    if (ranks_given) fail(Error{"--ranks", "gives one group on the first N GPUs; with --cp / --tp drop --ranks"});
    const auto o = unwrap(sched::parse_layout_order(order));
    const int tp_size = tp == 0 ? 1 : tp;
    return unwrap(cp == 0 ? sched::make_tp_layout(t.num_gpus(), tp_size, o)
                          : sched::make_layout(t.num_gpus(), cp, tp_size, o));
  }
  /// The --gpus map, checked against `t` (empty when not given): every GPU in range, none twice.
  [[nodiscard]] std::vector<std::int32_t> gpu_map(const topo::Topology& t) const {
    if (gpus.empty()) return {};
    if (uniform) fail(Error{"--gpus", "places a group on a --topology; --uniform has no GPUs to choose"});
    if (ranks_given || cp != 0 || tp != 0)
      fail(Error{"--gpus", "places one group by hand; drop --ranks, --cp and --tp"});
    return parse_gpu_list(gpus, "--gpus", t.num_gpus(), fmt::format("{} has {} GPUs", t.name, t.num_gpus()));
  }
  /// The ranks to run: the --uniform cluster's, or on a topology every GPU unless --ranks names fewer
  /// (a layout's: one CP group's; a --gpus map's: the GPUs it lists).
  [[nodiscard]] int ranks_for(const topo::Topology& t) const {
    if (uniform) return ranks;
    if (!gpus.empty()) return int(gpu_map(t).size());
    if (const auto l = layout_for(t)) return l->cp;
    if (!ranks_given) return t.num_gpus();
    if (ranks < 1 || ranks > t.num_gpus())
      fail(Error{"--ranks",
                 fmt::format("must be in [1, {}]: {} has {} GPUs, got {}", t.num_gpus(), t.name, t.num_gpus(), ranks)});
    return ranks;
  }
  /// The domains for charm: given, or 1 on --uniform, or the topology's domains the ranks span.
  [[nodiscard]] int domains_for(const topo::Topology& t) const {
    if (domains > 0) return domains;
    if (uniform) return 1;
    if (const auto l = layout_for(t)) return sim::default_domains(t, sched::layout_gpus(*l), l->cp);
    if (!gpus.empty()) {
      const auto map = gpu_map(t);
      return sim::default_domains(t, map, int(map.size()));
    }
    return sim::default_domains(t, ranks_for(t));
  }
};

}  // namespace charm::cli
