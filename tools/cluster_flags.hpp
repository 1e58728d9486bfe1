#pragma once
// The cluster flags of simulate, compare and advise, over the value they fill (app::Cluster, which checks
// them): a topology file or the uniform contention-free model, the placement, and what else each GPU holds.

#include <string>

#include "tools/app/cluster.hpp"
#include "tools/cli_common.hpp"
#include "topologies/topology_json.hpp"

namespace charm::cli {

/// A topology file, loaded (its errors are the user's), with what the loader read past said on stderr.
inline topo::Topology load_topology_file(const std::string& path, const topo::GpuOverrides& over = {}) {
  auto t = unwrap(topo::load_topology(path, over));
  for (const auto& w : t.warnings) print_warning(w);
  return t;
}

/// The cluster flags of simulate, compare and advise: the command's way of filling an app::Cluster (where
/// the topology comes from, the placement, --reserved-gb, --kernel, --assume-gpu, --max-memory).
struct ClusterFlags : app::Cluster {
  void add(CLI::App& app);
  /// The topology (app::Cluster::load), its readers' warnings on stderr.
  [[nodiscard]] topo::Topology get() const;
};

}  // namespace charm::cli
