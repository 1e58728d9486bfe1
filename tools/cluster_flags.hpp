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

/// --kernel and --assume-gpu as the topology loader takes them: a library name as it is, a CSV file of kernel
/// timings (charm bench-kernels' columns) read into a table.
[[nodiscard]] topo::GpuOverrides gpu_overrides(const std::string& kernel, const std::string& assume_gpu);

/// A topology file, loaded (its errors are the user's), with what the loader read past said on stderr.
inline topo::Topology load_topology_file(const std::string& path, const topo::GpuOverrides& over = {}) {
  auto t = unwrap(topo::load_topology(path, over));
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
  std::string kernel;      // --kernel: a library or a CSV of kernel timings over the file's
  std::string assume_gpu;  // --assume-gpu: the known part an unknown GPU model borrows from
  std::string max_memory;  // --max-memory: the budget of what these flags run (budget())

  std::vector<CLI::Option*> uniform_only;  // flags that describe the --uniform cluster and nothing else
  CLI::Option* domains_opt = nullptr;
  bool ranks_given = false;  // with --topology: one group on the topology's first `ranks` GPUs
  int cp = 0, tp = 0;        // a deployment's CP and TP sizes (0: not given)
  std::string gpus;          // --gpus: one group placed by hand, rank r on the r-th GPU listed
  /// --order's default: the layout orders (sched::parse_layout_order) name tp-cp first.
  static constexpr std::string_view kDefaultOrder = "tp-cp";
  std::string order{kDefaultOrder};

  void add(CLI::App& app);
  [[nodiscard]] topo::Topology get() const;
  [[nodiscard]] sched::MemoryBudget budget() const { return memory_budget(max_memory); }
  /// The deployment --cp / --tp describe on `t`, if either is given.
  [[nodiscard]] std::optional<sched::Layout> layout_for(const topo::Topology& t) const {
    if (cp == 0 && tp == 0) {
      if (order != kDefaultOrder) fail(Error{"--order", "orders the axes of a --cp / --tp layout; give one of them"});
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
