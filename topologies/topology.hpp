#pragma once
// Topology: GPUs, switches and links of a cluster, and the routes between GPUs.
//
// Vertices 0 .. num_gpus()-1 are GPUs (rank r runs on GPU r); the rest are
// switches (NVSwitch, PCIe switch, host bridge, NIC fabric). Links are full
// duplex: each direction is one *channel* (id 2*link + dir, dir 0 = a -> b)
// with the link's bandwidth. A channel is `shared` (every flow through it
// divides its capacity, as on a PCIe switch, a host bridge or a NIC) or
// `dedicated` (every flow gets the full rate, as NVLink through NVSwitch).
//
// Routes are the paths the hardware uses, chosen the way a collective library
// picks a transport, never by the link numbers: each link has a kind, and the
// route between two GPUs is the one whose worst kind is best (NVLink, then
// PCIe, then the host bridge, then the NIC, then the fabric), then the one with
// fewest hops, then the one with the lowest channel ids. Bandwidth and latency
// do not enter, so a calibration that refits them cannot move traffic onto
// another path. A file may also fix routes itself (`route_overrides`).
//
// A cluster of identical blocks (the nodes of the generator form, the GPUs of
// a --uniform cluster) keeps no GPU-by-GPU table: finalize checks that the
// blocks are copies of one another joined only through shared vertices (the
// fabric), searches from the GPUs of the first block only, and a route between
// any two blocks is the route between the first two with its channels moved to
// theirs. Other topologies keep a table of every pair.

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "support/dtype.hpp"
#include "support/enum_names.hpp"
#include "support/expected.hpp"
#include "topologies/gpu_arch.hpp"
#include "topologies/kernel_table.hpp"
#include "topologies/stack.hpp"

namespace charm::topo {

using GBps = double;

enum class Sharing : std::uint8_t { Shared, Dedicated };
inline constexpr EnumName<Sharing> kSharingNames[] = {{"shared", Sharing::Shared}, {"dedicated", Sharing::Dedicated}};

/// The transport a link belongs to. The order is the preference order of route
/// selection (lower is preferred), NCCL's: NVLink/NVSwitch, PCIe peer-to-peer
/// under a switch, through the host bridge(s), then the network (the GPU's NIC,
/// then the fabric beyond it). `Unspecified` is a link of a file that declares
/// no kinds; such a file has no others (see Topology::finalize).
enum class LinkKind : std::uint8_t { NvLink, Pcie, Host, Nic, Fabric, Unspecified };

[[nodiscard]] std::string_view to_string(LinkKind k);
/// "nvlink", "pcie", "host", "nic", "fabric"; nullopt for anything else (Unspecified has no name in files).
[[nodiscard]] std::optional<LinkKind> link_kind_from(std::string_view s);

/// What one GPU can do; the compute model is calibrated through these numbers.
struct GpuSpec {
  std::string model = "gpu";
  double tflops_bf16 = 100.0, tflops_fp16 = 100.0, tflops_fp32 = 50.0;  // dense peak
  GBps hbm_gbps = 0;                                                    // 0: memory-bound ops are free
  double efficiency_fwd = 1.0;  // attained fraction of peak on a large forward block
  double efficiency_bwd = 1.0;  // ... on a large backward block
  double half_tokens = 0;       // efficiency halves for a block side of this many tokens (0: shape-independent)
  double launch_us = 0;         // per-kernel launch overhead
  double gemm_efficiency = 0;   // attained fraction of dense peak on large GEMMs (0: the architecture's, gpu_arch.hpp)
  double memory_gb = 0;         // device memory in GB (1e9 bytes), datasheet figure; 0: unknown (no fit verdict)
  /// The kernel's shape (gpu_arch.hpp): SMs and the attention kernel's tiles. sm_count 0: a block's
  /// time is its FLOPs over the attained peak (the shape-free model, with half_tokens).
  int sm_count = 0;
  KernelTile tile_fwd, tile_bwd;
  /// The attention kernel library's timings (kernel_table.hpp): with one, a block attains what the
  /// table gives for its pass, mask, head dim and size, times kernel_scale; without one (null), the
  /// flat efficiency above. A file's "efficiency" chooses the flat model.
  std::shared_ptr<const KernelTable> kernel;
  double kernel_scale_fwd = 1, kernel_scale_bwd = 1;
  std::string family;  // the architecture (gpu_arch.hpp); empty when the model is not known
  [[nodiscard]] double peak_flops(DType t) const {
    return 1e12 * (t == DType::FP32 ? tflops_fp32 : t == DType::FP16 ? tflops_fp16 : tflops_bf16);
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
  LinkKind kind = LinkKind::Unspecified;
};

/// A route fixed by the topology file instead of chosen: the channels from GPU
/// src to GPU dst, in order (a connected path that passes no other GPU).
struct RouteOverride {
  int src = 0, dst = 0;
  std::vector<std::int32_t> channels;
};

/// Hard limit on route length, so a flow's route fits in a fixed-size slot.
inline constexpr int kMaxHops = 8;

/// The channels of one route, in order, held by value (at most kMaxHops). It converts
/// to a span for the duration of a call; keep the Route itself, not a span of a temporary.
class Route {
 public:
  Route() = default;
  explicit Route(std::span<const std::int32_t> chs) {
    for (const auto c : chs) push_back(c);
  }
  void push_back(std::int32_t ch) { ch_[n_++] = ch; }
  [[nodiscard]] const std::int32_t* begin() const { return ch_.data(); }
  [[nodiscard]] const std::int32_t* end() const { return ch_.data() + n_; }
  [[nodiscard]] const std::int32_t* data() const { return ch_.data(); }
  [[nodiscard]] std::size_t size() const { return n_; }
  [[nodiscard]] bool empty() const { return n_ == 0; }
  [[nodiscard]] std::int32_t front() const { return ch_[0]; }
  [[nodiscard]] std::int32_t back() const { return ch_[n_ - 1]; }
  [[nodiscard]] std::int32_t operator[](std::size_t i) const { return ch_[i]; }
  // NOLINTNEXTLINE(google-explicit-constructor): a route is read wherever a span of channels is
  operator std::span<const std::int32_t>() const { return {ch_.data(), n_}; }
  friend bool operator==(const Route& a, const Route& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  std::array<std::int32_t, kMaxHops> ch_{};
  std::size_t n_ = 0;
};

/// How a cluster of identical blocks is numbered, for routes without a
/// GPU-by-GPU table. Block b holds GPUs [b * gpus, (b + 1) * gpus), links
/// [b * links, (b + 1) * links) and the switches [first_vertex + b * vertices,
/// first_vertex + (b + 1) * vertices); every other vertex is shared. A claim:
/// finalize checks it and keeps a table when it does not hold.
struct BlockLayout {
  int count = 0;  // blocks; fewer than 2: no block structure
  int gpus = 0;
  int links = 0;
  int first_vertex = 0;
  int vertices = 0;
};

/// Where the model's values come from, for the reports' `# model:` line: one phrase per layer
/// (kernel, stack, links) and every value that is an assumption rather than a source.
struct ModelSources {
  std::string kernel, stack, links;
  std::vector<std::string> assumed;
  /// "kernel ...; stack ...; links ...; assumed: ..." on one line.
  [[nodiscard]] std::string line() const;
};

class Topology {
 public:
  std::string name;
  std::string notes;
  bool uniform = false;  // make_uniform's: contention-free links and an ideal GPU, the paper's formulas' setting
  /// What the file says that the loader read past, one line each (a `numa` block where numa_per_node is 1): the
  /// CLI prints them on stderr; programs that generate documents may ignore them.
  std::vector<std::string> warnings;
  GpuSpec gpu;      // every GPU has this spec
  StackSpec stack;  // the software around the kernels (stack.hpp)
  ModelSources sources;
  std::vector<std::string> vertex_names;
  std::vector<Link> links;
  /// Hierarchy level names, outermost first (e.g. {"node", "numa"}), and per GPU its index at each level.
  std::vector<std::string> levels;
  std::vector<std::vector<int>> gpu_place;
  /// The level whose units are charm's domains (-1: one domain).
  int domain_level = -1;
  /// Routes that replace the chosen ones (finalize installs them).
  std::vector<RouteOverride> route_overrides;
  /// The block structure the builder claims (generator form, --uniform); see BlockLayout.
  BlockLayout blocks;

  [[nodiscard]] int num_gpus() const { return num_gpus_; }
  [[nodiscard]] int num_vertices() const { return static_cast<int>(vertex_names.size()); }
  [[nodiscard]] int num_channels() const { return 2 * static_cast<int>(links.size()); }
  [[nodiscard]] const Link& channel_link(int ch) const { return links[static_cast<std::size_t>(ch / 2)]; }
  [[nodiscard]] std::string channel_name(int ch) const;
  /// Channels from GPU src to GPU dst, in order.
  [[nodiscard]] Route route(int src, int dst) const;
  [[nodiscard]] double route_latency_us(int src, int dst) const;
  /// The latency of these channels, in order (a route already looked up).
  [[nodiscard]] double latency_us(std::span<const std::int32_t> channels) const;
  /// The narrowest channel's bandwidth_gbps from src to dst. What a lone flow attains (per-flow and
  /// injection limits too) is the simulator's: sim::route_flow_gbps.
  [[nodiscard]] GBps route_bandwidth_gbps(int src, int dst) const;
  /// The least preferred link kind on the route (its transport).
  [[nodiscard]] LinkKind route_kind(int src, int dst) const;
  /// Whether the route of (src, dst) comes from `route_overrides`.
  [[nodiscard]] bool route_overridden(int src, int dst) const { return override_index(src, dst) >= 0; }
  /// Whether routes come from the block structure (no GPU-by-GPU table).
  [[nodiscard]] bool routes_by_block() const { return by_block_; }
  /// With routes by block: no route between two blocks crosses the same link, in the same direction, of
  /// both blocks' copies (each block's copy of a channel carries a route's bytes at most once).
  [[nodiscard]] bool block_routes_cross_each_channel_once() const { return block_routes_once_; }
  /// The vertex a channel leaves and the one it enters.
  [[nodiscard]] int channel_from(int ch) const { return ch % 2 == 0 ? channel_link(ch).a : channel_link(ch).b; }
  [[nodiscard]] int channel_to(int ch) const { return ch % 2 == 0 ? channel_link(ch).b : channel_link(ch).a; }

  /// Number of charm domains and the check that GPUs are numbered domain by domain.
  [[nodiscard]] int domains() const;
  [[nodiscard]] int domain_of(int gpu) const;
  /// domain_of every GPU, in one pass.
  [[nodiscard]] std::vector<int> gpu_domains() const;

  /// Sets the GPU count (the first n vertices), chooses every route and installs
  /// `route_overrides`; errors name the GPU that no route reaches.
  [[nodiscard]] Status finalize(int num_gpus, const std::string& where);

 private:
  struct RouteSearch;  // finalize's search state (topology.cpp)
  [[nodiscard]] int override_index(int src, int dst) const;
  [[nodiscard]] bool check_blocks(const std::vector<int>& link_class, const std::vector<double>& tie) const;
  [[nodiscard]] Status check_domain_order(const std::string& where) const;
  [[nodiscard]] Status classify_links(const std::string& where, RouteSearch& rs) const;
  [[nodiscard]] Status install_overrides(const std::string& where);
  [[nodiscard]] bool route_by_block(RouteSearch& rs);
  [[nodiscard]] Status route_table(RouteSearch& rs, const std::string& where);

  int num_gpus_ = 0;
  // Table: the route of (s, d) at [s * n + d]. By block: the routes from the
  // first block's GPUs to the first two blocks' GPUs, at [s * 2 * gpus + d].
  bool by_block_ = false;
  bool block_routes_once_ = false;
  BlockLayout layout_;
  std::vector<std::uint32_t> route_begin_;
  std::vector<std::int32_t> route_ch_;
  // Installed overrides, sorted by (src, dst).
  std::vector<std::uint64_t> override_key_;
  std::vector<Route> override_route_;
};

/// Plausible ranges of a cluster's physical numbers. Beyond them a number is a
/// unit mistake (bytes/s written where GB/s belong, FLOP/s for TFLOP/s), and
/// the simulator's arithmetic leaves the finite doubles: 1e300 GB/s is an
/// infinite byte rate, 1e-30 GB/s a transfer time no clock can hold. Topology
/// files (and `charm sweep --set`) and the `--uniform` flags are held to them.
inline constexpr double kMinGbps = 1e-3, kMaxGbps = 1e7;      // 1 MB/s .. 10 PB/s
inline constexpr double kMinTflops = 1e-3, kMaxTflops = 1e7;  // 1 GFLOP/s .. 10 EFLOP/s
inline constexpr double kMaxLatencyUs = 1e6;                  // one second per message or launch
inline constexpr double kMinEfficiency = 1e-3;                // of peak
inline constexpr double kMaxHalfTokens = 1e9;

enum class Quantity : std::uint8_t {
  Bandwidth,   // GB/s, > 0
  Tflops,      // TFLOP/s, > 0
  Latency,     // us, >= 0
  Efficiency,  // fraction of peak, (0, 1]
  HalfTokens,  // tokens, >= 0
};
/// Empty when `x` is a plausible `q`; else why not, in the words of `field`, naming
/// the likely unit mistake ("312000000000000 looks like FLOP/s; tflops is in TFLOP/s").
/// Zero, where a field allows it for "none" (hbm_gbps, per_flow_gbps), is the caller's to allow.
[[nodiscard]] std::string implausible(Quantity q, double x, std::string_view field);

/// A contention-free, fully connected cluster: each GPU hangs off one ideal
/// switch by a dedicated link of `bw_gbps`, so every pair gets the full rate
/// and a GPU may talk to any number of peers at once. Latency is split over the two hops.
[[nodiscard]] Topology make_uniform(int gpus, GBps bw_gbps, double tflops, double latency_us = 0, GBps hbm_gbps = 0);

}  // namespace charm::topo
