#pragma once
// FairShareNetwork: flows over channels, sharing them max-min fairly.
//
// A *shared* channel divides its capacity among the flows that cross it; a
// *dedicated* channel gives every flow its full capacity (a per-flow cap).
// Either kind may also cap what one flow reaches (a collective library's
// channels per peer), below its capacity.
// Rates are the max-min fair allocation (progressive filling), recomputed,
// when flows start or end, only for the flows connected to the change through
// shared channels. A flow's remaining bytes are settled at every rate change.

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "topologies/topology.hpp"

namespace charm::sim {

/// What one transfer from GPU src to dst attains by itself in the simulator (GB/s): the least, over
/// its route, of each link's bandwidth, per-flow rate and injection limit (FairShareNetwork::lone_flow_rate).
/// Not topo::Topology::route_bandwidth_gbps, the narrowest link's bandwidth_gbps alone.
[[nodiscard]] double route_flow_gbps(const topo::Topology& t, int src, int dst);

class FairShareNetwork {
 public:
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  struct Channel {
    double capacity_bytes_per_s = 0;
    bool shared = true;
    double flow_cap_bytes_per_s = kInf;  // the most one flow through it reaches by itself
  };
  explicit FairShareNetwork(std::vector<Channel> channels);
  /// The channels of a topology, in its channel numbering.
  [[nodiscard]] static std::vector<Channel> channels_of(const topo::Topology& t);
  /// One direction of a link as the network models it: bandwidth, sharing, per_flow_gbps and injection_gbps.
  [[nodiscard]] static Channel channel_of(const topo::Link& l);
  /// The rate one flow reaches over the channels of its route with nothing else in flight (bytes/s): the
  /// least of each channel's capacity and per-flow cap.
  [[nodiscard]] static double lone_flow_rate(std::span<const Channel> route_channels);

  /// Starts a flow of `bytes` over `route` (copied; a topo::Route holds at most topo::kMaxHops channels). Returns
  /// its id.
  int add_flow(const topo::Route& route, double bytes, double now_s);
  /// Ends a flow (its bytes are counted on each channel of its route).
  void remove_flow(int id, double now_s);
  /// Scales a channel's capacity and per-flow cap (1: as built): the links of a GPU that is busy
  /// computing carry less while it does. Its flows are re-shared at the next resolve.
  void set_channel_scale(int ch, double scale, double now_s);
  /// Recomputes the rates of flows affected since the last call; calls on_change(id) for each flow whose rate changed.
  template <class F>
  void resolve(double now_s, F&& on_change) {
    solve(now_s);
    for (int id : changed_) on_change(id);
  }
  [[nodiscard]] bool dirty() const { return !dirty_flows_.empty() || !dirty_channels_.empty(); }

  [[nodiscard]] double rate(int id) const { return flows_[std::size_t(id)].rate; }
  /// Seconds until the flow drains at its current rate (kInf if it has no rate).
  [[nodiscard]] double time_left_s(int id) const;
  [[nodiscard]] std::size_t active_flows() const { return active_; }

  // Per-channel statistics, valid after the last flow ended.
  [[nodiscard]] double channel_bytes(int ch) const { return stats_[std::size_t(ch)].bytes; }
  [[nodiscard]] double channel_busy_s(int ch) const { return stats_[std::size_t(ch)].busy_s; }
  [[nodiscard]] int channel_max_flows(int ch) const { return stats_[std::size_t(ch)].max_flows; }

 private:
  struct Flow {
    std::int32_t route[topo::kMaxHops] = {};
    std::int32_t pos[topo::kMaxHops] = {};  // index of this flow in each channel's list
    std::uint8_t hops = 0;
    bool active = false;
    double bytes = 0, remaining = 0, rate = 0, cap = kInf, last_s = 0;
  };
  struct ChannelStats {
    double bytes = 0, busy_s = 0, busy_since_s = 0;
    int max_flows = 0;
  };
  void solve(double now_s);
  /// The flows and shared channels connected to the changes since the last solve, into comp_flows_ and comp_ch_.
  void collect_component();
  void settle(Flow& f, double now_s);
  [[nodiscard]] double flow_cap(const Flow& f) const;

  std::vector<Channel> ch_;
  std::vector<double> ch_scale_;                  // per channel, 1 unless set_channel_scale
  std::vector<std::vector<std::int32_t>> on_ch_;  // active flows per channel
  std::vector<ChannelStats> stats_;
  std::vector<Flow> flows_;
  std::vector<int> free_;
  std::size_t active_ = 0;
  // Scratch, reused across solves.
  std::vector<int> dirty_flows_, dirty_channels_, changed_, comp_flows_, comp_ch_, ch_count_;
  std::vector<std::uint32_t> ch_mark_, flow_mark_;
  std::vector<double> ch_rem_;
  std::vector<char> frozen_;
  std::uint32_t epoch_ = 0;
};

}  // namespace charm::sim
