#pragma once
// Why a simulated run takes the time it takes: the resource that bounds it and
// the figure behind it, where the critical path spends its time, and whether
// the run's buffers fit in the GPU. `charm simulate`, `compare` and `advise`
// print these; they are derived from the simulation alone (nothing is re-run).
//
// The bounding resource is the busiest one over the makespan:
//   - compute: the busiest rank's attention kernels (Compute ops);
//   - memory:  the busiest rank's memory-bound ops (Merge, Accumulate, Copy at HBM rate);
//   - a link channel: the fraction of the makespan with at least one flow on it.
// Below kSaturated nothing is saturated, and the run is bound by its dependency
// chain (latency, rendezvous, imbalance): the explanation says so.

#include <string>
#include <vector>

#include "scheduler/ir/plan.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology.hpp"

namespace charm::sim {

inline constexpr double kSaturated = 0.6;

/// Traffic of one buffer kind through a channel: how many messages and bytes.
struct KindTraffic {
  ir::BufKind kind = ir::BufKind::Q;
  int messages = 0;
  double bytes = 0;
};

struct Bottleneck {
  std::string resource;  // "compute", "memory", or a channel's name ("gpu0->nvswitch0")
  std::string
      resource_class;      // "compute", "memory", or the link kind ("nvlink", "pcie", "host", "nic", "fabric", "link")
  double utilisation = 0;  // busy fraction of the makespan
  int rank = 0;            // compute/memory: the busiest rank
  bool saturated = false;  // utilisation >= kSaturated
  std::vector<KindTraffic> traffic;  // a channel: what it carries, largest first
  std::string figure;                // the byte or FLOP figure behind it, one clause
  int channel = -1;                  // the link's channel; -1 for a rank's compute or memory
  /// One line: "fabric nic0->fabric 97% busy: carries Q 16 x 67.1 MB vs KV 32 x 16.8 MB (GQA 8:1)".
  [[nodiscard]] std::string line() const;
  /// A table cell: "nic 97% Q", "compute 88%", "latency (nic 41%)".
  [[nodiscard]] std::string brief() const;
};

/// Where the critical path spends its time, by class, in seconds.
struct PathShare {
  std::string what;  // "compute", "memory", a link kind ("nvlink", "nic", ...), or "wait"
  Seconds seconds = 0;
};

struct Explanation {
  Bottleneck bottleneck;
  std::vector<PathShare> path;  // largest first; sums to the makespan
  ir::OpId first_op = ir::kNone, last_op = ir::kNone;
};

[[nodiscard]] Explanation explain(const ir::Plan& plan, const SimResult& r, const topo::Topology& t);

/// "62% compute, 30% nic, 5% nvlink, 3% wait"
[[nodiscard]] std::string path_shares_text(const std::vector<PathShare>& path, Seconds makespan);

/// Whether `peak_bytes` of attention buffers plus `reserved_gb` of the rest of the model fit in the GPU.
struct MemoryVerdict {
  bool known = false;  // the topology gives gpu.memory_gb
  bool fits = true;
  double buffers_gb = 0, reserved_gb = 0, need_gb = 0, have_gb = 0;
  [[nodiscard]] std::string line() const;  // "fits: 2.1 + 40.0 reserved of 80 GB" / "DOES NOT FIT: ..."
};
[[nodiscard]] MemoryVerdict memory_verdict(ir::Bytes peak_bytes, double reserved_gb, const topo::GpuSpec& gpu);

/// "67.1 MB", "1.07 GB", "512 B": decimal units, three significant digits.
[[nodiscard]] std::string human_bytes(double bytes);

}  // namespace charm::sim
