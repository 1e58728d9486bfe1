#pragma once
// Topology: GPUs, switches and links of a cluster, and the routes between GPUs.
//
// Vertices 0 .. num_gpus()-1 are GPUs (rank r runs on GPU r); the rest are
// switches (NVSwitch, PCIe switch, host bridge, NIC fabric). Links are full
// duplex: each direction is one *channel* (id 2*link + dir, dir 0 = a -> b)
// with the link's bandwidth. A channel is `shared` (every flow through it
// divides its capacity, as on a PCIe switch, a host bridge or a NIC) or
// `dedicated` (every flow gets the full rate, as NVLink through NVSwitch).
// Routes are shortest paths in the link graph (Boost.Graph, Dijkstra).

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "scheduler/ir/expected.hpp"
#include "scheduler/ir/workload.hpp"

namespace charm::topo {

using GBps = double;

enum class Sharing : std::uint8_t { Shared, Dedicated };

/// What one GPU can do; the compute model is calibrated through these numbers.
struct GpuSpec {
  std::string model = "gpu";
  double tflops_bf16 = 100.0, tflops_fp16 = 100.0, tflops_fp32 = 50.0;  // dense peak
  GBps hbm_gbps = 0;                // 0: memory-bound ops are free
  double efficiency_fwd = 1.0;      // attained fraction of peak on a large forward block
  double efficiency_bwd = 1.0;      // ... on a large backward block
  double half_tokens = 0;           // efficiency halves for a block side of this many tokens (0: shape-independent)
  double launch_us = 0;             // per-kernel launch overhead
  [[nodiscard]] double peak_flops(ir::DType t) const {
    return 1e12 * (t == ir::DType::FP32 ? tflops_fp32 : t == ir::DType::FP16 ? tflops_fp16 : tflops_bf16);
  }
};

struct Link {
  int a = 0, b = 0;  // vertex ids
  GBps bandwidth_gbps = 0;
  double latency_us = 0;
  Sharing sharing = Sharing::Shared;
  /// The rate one transfer reaches on this link by itself (0: bandwidth_gbps). A
  /// collective library moves one peer's data over a few channels, each one thread
  /// block, so a lone point-to-point flow stays below what the wire carries; several
  /// concurrent flows still share bandwidth_gbps.
  GBps per_flow_gbps = 0;
  /// What all concurrent flows through this link reach together (0: no limit beyond
  /// bandwidth_gbps and the sharing policy). On a dedicated GPU link it is the GPU's
  /// injection limit: the channels and copy engines a collective library drives from
  /// one GPU are a per-GPU resource, so its concurrent flows share them even where
  /// the switch would carry each at the full rate.
  GBps injection_gbps = 0;
  std::string name;  // "a<->b" unless given
};

/// Hard limit on route length, so a flow's route fits in a fixed-size slot.
inline constexpr int kMaxHops = 8;

class Topology {
 public:
  std::string name;
  std::string notes;
  GpuSpec gpu;                        // every GPU has this spec
  std::vector<std::string> vertex_names;
  std::vector<Link> links;
  /// Hierarchy level names, outermost first (e.g. {"node", "numa"}), and per GPU its index at each level.
  std::vector<std::string> levels;
  std::vector<std::vector<int>> gpu_place;
  /// The level whose units are charm's domains (-1: one domain).
  int domain_level = -1;

  [[nodiscard]] int num_gpus() const { return num_gpus_; }
  [[nodiscard]] int num_vertices() const { return static_cast<int>(vertex_names.size()); }
  [[nodiscard]] int num_channels() const { return 2 * static_cast<int>(links.size()); }
  [[nodiscard]] const Link& channel_link(int ch) const { return links[static_cast<std::size_t>(ch / 2)]; }
  [[nodiscard]] std::string channel_name(int ch) const;
  /// Channels from GPU src to GPU dst, in order.
  [[nodiscard]] std::span<const std::int32_t> route(int src, int dst) const {
    const auto i = static_cast<std::size_t>(src) * static_cast<std::size_t>(num_gpus_) + static_cast<std::size_t>(dst);
    return {route_ch_.data() + route_begin_[i], route_ch_.data() + route_begin_[i + 1]};
  }
  [[nodiscard]] double route_latency_us(int src, int dst) const;
  /// Bandwidth a lone flow gets from src to dst (the narrowest channel).
  [[nodiscard]] GBps route_bandwidth_gbps(int src, int dst) const;

  /// Number of charm domains and the check that GPUs are numbered domain by domain.
  [[nodiscard]] int domains() const;
  [[nodiscard]] int domain_of(int gpu) const;

  /// Sets the GPU count (the first n vertices) and derives routes; errors name the GPU that no route reaches.
  [[nodiscard]] Status finalize(int num_gpus, const std::string& where);

 private:
  int num_gpus_ = 0;
  std::vector<std::uint32_t> route_begin_;
  std::vector<std::int32_t> route_ch_;
};

/// A contention-free, fully connected cluster: each GPU hangs off one ideal
/// switch by a dedicated link of `bw_gbps`, so every pair gets the full rate
/// and a GPU may talk to any number of peers at once. Latency is split over the two hops.
[[nodiscard]] Topology make_uniform(int gpus, GBps bw_gbps, double tflops, double latency_us = 0, GBps hbm_gbps = 0);

} // namespace charm::topo
