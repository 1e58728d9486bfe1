#pragma once
// The cluster a simulation, a comparison or an advice runs on, as a value: where its topology comes from (a
// topology file, an inline document, or the uniform contention-free model), how the ranks are placed on it,
// what else each GPU holds, and the memory budget of the work. The command's flags (cli::ClusterFlags) and the
// Python module's arguments both fill one; every check and every derived figure is here, once, and returns its
// error as a value naming the flag (the Python module's argument of the same name) it is about.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/planners/estimate.hpp"
#include "scheduler/planners/layout.hpp"
#include "support/expected.hpp"
#include "topologies/topology.hpp"
#include "topologies/topology_json.hpp"

namespace charm::app {

/// Told each warning of what was read past (a kernel timings file's, a topology file's), in the order read.
using WarningSink = std::function<void(const std::string&)>;

struct Cluster {
  std::string topology;                        // --topology: a topology file
  std::optional<nlohmann::json> topology_doc;  // or the document itself (the Python module's dict)
  bool uniform = false;                        // --uniform: the contention-free model, from the numbers below
  int ranks = 8;
  bool ranks_given = false;  // with a topology: one group on its first `ranks` GPUs
  int domains = 0;           // 0: from the topology (or 1 on the uniform model)
  bool domains_given = false;
  // The uniform model's numbers, and which were given: with a topology they are refused (its own apply).
  double bw_gbps = 0, tflops = 0, latency_us = 0, hbm_gbps = 0;
  bool bw_given = false, tflops_given = false, latency_given = false, hbm_given = false;

  double reserved_gb = 0;  // --reserved-gb: memory the rest of the model holds on each GPU
  std::string kernel;      // --kernel: a library, or a CSV of kernel timings over the file's
  std::string assume_gpu;  // --assume-gpu: the known part an unknown GPU model borrows from
  std::string max_memory;  // --max-memory: the budget of the work (budget())

  int cp = 0, tp = 0;  // a deployment's CP and TP sizes (0: not given)
  std::string gpus;    // --gpus: one group placed by hand, rank r on the r-th GPU listed
  /// --order's default: the layout orders (sched::parse_layout_order) name tp-cp first.
  static constexpr std::string_view kDefaultOrder = "tp-cp";
  std::string order{kDefaultOrder};

  /// --domains checked alone: at least 1 where given (the Python module checks it as it reads it).
  [[nodiscard]] Status check_domains() const;
  /// The topology, every flag above checked against where it comes from; `warn` hears what the files' readers
  /// read past (kernel timings first, then the topology file).
  [[nodiscard]] Expected<topo::Topology> load(const WarningSink& warn) const;
  /// The budget --max-memory sets (half of this machine's memory when empty).
  [[nodiscard]] Expected<sched::MemoryBudget> budget() const;
  /// The deployment --cp / --tp describe on `t`, if either is given.
  [[nodiscard]] Expected<std::optional<sched::Layout>> layout_for(const topo::Topology& t) const;
  /// The --gpus map, checked against `t` (empty when not given): every GPU in range, none twice.
  [[nodiscard]] Expected<std::vector<std::int32_t>> gpu_map(const topo::Topology& t) const;
  /// The ranks to run: the uniform cluster's, or on a topology every GPU unless --ranks names fewer
  /// (a layout's: one CP group's; a --gpus map's: the GPUs it lists).
  [[nodiscard]] Expected<int> ranks_for(const topo::Topology& t) const;
  /// The domains for charm: given, or 1 on the uniform model, or the topology's domains the ranks span.
  [[nodiscard]] Expected<int> domains_for(const topo::Topology& t) const;
};

/// --kernel and --assume-gpu as the topology loader takes them: a library name as it is, a CSV file of kernel
/// timings (charm bench-kernels' columns) read into a table; `warn` hears what its reader read past.
[[nodiscard]] Expected<topo::GpuOverrides> gpu_overrides(const std::string& kernel, const std::string& assume_gpu,
                                                         const WarningSink& warn);

}  // namespace charm::app
