#include "sim/fair_share_network.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace charm::sim {

FairShareNetwork::FairShareNetwork(std::vector<Channel> channels) : ch_(std::move(channels)) {
  on_ch_.resize(ch_.size());
  stats_.resize(ch_.size());
  ch_mark_.assign(ch_.size(), 0);
  ch_rem_.assign(ch_.size(), 0);
  ch_count_.assign(ch_.size(), 0);
  ch_scale_.assign(ch_.size(), 1.0);
}

FairShareNetwork::Channel FairShareNetwork::channel_of(const topo::Link& l) {
  const double bw = l.bandwidth_gbps * 1e9, per_flow = l.per_flow_gbps > 0 ? l.per_flow_gbps * 1e9 : kInf;
  // An aggregate limit makes the channel shared at that rate; on a dedicated
  // link each flow still may not exceed the link's own bandwidth.
  if (l.injection_gbps > 0) return {l.injection_gbps * 1e9, true, std::min(per_flow, bw)};
  return {bw, l.sharing == topo::Sharing::Shared, per_flow};
}

std::vector<FairShareNetwork::Channel> FairShareNetwork::channels_of(const topo::Topology& t) {
  std::vector<Channel> c(static_cast<std::size_t>(t.num_channels()));
  for (int i = 0; i < t.num_channels(); ++i) c[std::size_t(i)] = channel_of(t.channel_link(i));
  return c;
}

double FairShareNetwork::lone_flow_rate(std::span<const Channel> route_channels) {
  // Alone, a flow takes a shared channel's whole capacity, a dedicated one's too, and no more than any cap.
  double r = kInf;
  for (const auto& c : route_channels) r = std::min({r, c.capacity_bytes_per_s, c.flow_cap_bytes_per_s});
  return r;
}

double route_flow_gbps(const topo::Topology& t, int src, int dst) {
  std::array<FairShareNetwork::Channel, topo::kMaxHops> on_route{};
  std::size_t n = 0;
  for (const auto c : t.route(src, dst)) on_route[n++] = FairShareNetwork::channel_of(t.channel_link(c));
  return FairShareNetwork::lone_flow_rate(std::span(on_route.data(), n)) / 1e9;
}

int FairShareNetwork::add_flow(const topo::Route& route, double bytes, double now_s) {
  int id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<int>(flows_.size());
    flows_.emplace_back();
    flow_mark_.push_back(0);
    frozen_.push_back(0);
  }
  Flow& f = flows_[std::size_t(id)];
  std::copy(route.begin(), route.end(), f.route);
  f.hops = static_cast<std::uint8_t>(route.size());
  f.active = true;
  f.bytes = f.remaining = bytes;
  f.rate = 0;
  f.last_s = now_s;
  f.cap = flow_cap(f);
  for (std::size_t k = 0; k < route.size(); ++k) {
    const auto c = std::size_t(route[k]);
    auto& list = on_ch_[c];
    if (list.empty()) stats_[c].busy_since_s = now_s;
    f.pos[k] = static_cast<std::int32_t>(list.size());
    list.push_back(id);
    stats_[c].max_flows = std::max(stats_[c].max_flows, static_cast<int>(list.size()));
  }
  ++active_;
  dirty_flows_.push_back(id);
  return id;
}

void FairShareNetwork::remove_flow(int id, double now_s) {
  Flow& f = flows_[std::size_t(id)];
  for (int k = 0; k < f.hops; ++k) {
    const auto c = std::size_t(f.route[k]);
    auto& list = on_ch_[c];
    const auto p = std::size_t(f.pos[k]);
    const int moved = list.back();
    list[p] = moved;
    list.pop_back();
    if (moved != id) {
      Flow& m = flows_[std::size_t(moved)];
      for (int h = 0; h < m.hops; ++h)
        if (m.route[h] == f.route[k]) {
          m.pos[h] = static_cast<std::int32_t>(p);
          break;
        }
    }
    stats_[c].bytes += f.bytes;
    if (list.empty()) stats_[c].busy_s += now_s - stats_[c].busy_since_s;
    if (ch_[c].shared) dirty_channels_.push_back(static_cast<int>(c));
  }
  f.active = false;
  --active_;
  free_.push_back(id);
}

double FairShareNetwork::flow_cap(const Flow& f) const {
  double cap = kInf;
  for (int k = 0; k < f.hops; ++k) {
    const auto c = std::size_t(f.route[k]);
    if (!ch_[c].shared) cap = std::min(cap, ch_[c].capacity_bytes_per_s * ch_scale_[c]);
    cap = std::min(cap, ch_[c].flow_cap_bytes_per_s * ch_scale_[c]);
  }
  return cap;
}

void FairShareNetwork::set_channel_scale(int ch, double scale, double now_s) {
  const auto c = std::size_t(ch);
  if (ch_scale_[c] == scale) return;
  ch_scale_[c] = scale;
  for (const int id : on_ch_[c]) {
    Flow& f = flows_[std::size_t(id)];
    settle(f, now_s);
    f.cap = flow_cap(f);
    dirty_flows_.push_back(id);
  }
  // An idle channel takes its new rate with nothing to re-share.
  if (ch_[c].shared && !on_ch_[c].empty()) dirty_channels_.push_back(ch);
}

void FairShareNetwork::settle(Flow& f, double now_s) {
  if (f.rate > 0) f.remaining = std::max(0.0, f.remaining - f.rate * (now_s - f.last_s));
  f.last_s = now_s;
}

double FairShareNetwork::time_left_s(int id) const {
  const Flow& f = flows_[std::size_t(id)];
  if (f.remaining <= 0) return 0;
  if (!(f.rate > 0)) return kInf;
  return f.remaining / f.rate;
}

void FairShareNetwork::collect_component() {
  ++epoch_;
  comp_flows_.clear();
  comp_ch_.clear();
  // Collect the component: flows reachable from the changes through shared channels.
  auto visit_ch = [&](int c) {
    if (ch_mark_[std::size_t(c)] == epoch_ || !ch_[std::size_t(c)].shared) return;
    ch_mark_[std::size_t(c)] = epoch_;
    comp_ch_.push_back(c);
  };
  auto visit_flow = [&](int id) {
    if (flow_mark_[std::size_t(id)] == epoch_ || !flows_[std::size_t(id)].active) return;
    flow_mark_[std::size_t(id)] = epoch_;
    comp_flows_.push_back(id);
  };
  for (int id : dirty_flows_) visit_flow(id);
  for (int c : dirty_channels_) visit_ch(c);
  dirty_flows_.clear();
  dirty_channels_.clear();
  std::size_t fi = 0, ci = 0;
  while (fi < comp_flows_.size() || ci < comp_ch_.size()) {
    for (; fi < comp_flows_.size(); ++fi) {
      const Flow& f = flows_[std::size_t(comp_flows_[fi])];
      for (int k = 0; k < f.hops; ++k) visit_ch(f.route[k]);
    }
    for (; ci < comp_ch_.size(); ++ci)
      for (int id : on_ch_[std::size_t(comp_ch_[ci])]) visit_flow(id);
  }
}

void FairShareNetwork::solve(double now_s) {
  changed_.clear();
  if (!dirty()) return;
  collect_component();
  // Progressive filling: every unfrozen flow rises at the same level until a
  // shared channel saturates or the flow reaches its dedicated cap.
  for (int c : comp_ch_) {
    ch_rem_[std::size_t(c)] = ch_[std::size_t(c)].capacity_bytes_per_s * ch_scale_[std::size_t(c)];
    ch_count_[std::size_t(c)] = static_cast<int>(on_ch_[std::size_t(c)].size());
  }
  for (int id : comp_flows_) frozen_[std::size_t(id)] = 0;
  std::size_t left = comp_flows_.size();
  double level = 0;
  constexpr double kEps = 1e-12;
  auto freeze = [&](int id) {
    Flow& f = flows_[std::size_t(id)];
    frozen_[std::size_t(id)] = 1;
    --left;
    for (int k = 0; k < f.hops; ++k) {
      const auto c = std::size_t(f.route[k]);
      if (ch_[c].shared) --ch_count_[c];
    }
    const double r = std::min(level, f.cap);
    if (r != f.rate) {
      settle(f, now_s);
      f.rate = r;
      changed_.push_back(id);
    }
  };
  while (left > 0) {
    // The tightest constraint: a shared channel's fair share, or a flow's own cap.
    double d = kInf;
    int tight_ch = -1, tight_flow = -1;
    for (int c : comp_ch_)
      if (ch_count_[std::size_t(c)] > 0 && ch_rem_[std::size_t(c)] / ch_count_[std::size_t(c)] < d) {
        d = ch_rem_[std::size_t(c)] / ch_count_[std::size_t(c)];
        tight_ch = c;
      }
    for (int id : comp_flows_)
      if (!frozen_[std::size_t(id)] && flows_[std::size_t(id)].cap - level < d) {
        d = flows_[std::size_t(id)].cap - level;
        tight_ch = -1;
        tight_flow = id;
      }
    if (!(d < kInf)) d = 0;  // no constraint at all: cannot happen for a routed flow of finite capacity
    level += d;
    for (int c : comp_ch_) ch_rem_[std::size_t(c)] -= d * ch_count_[std::size_t(c)];
    const std::size_t left_before = left;
    for (int id : comp_flows_) {
      if (frozen_[std::size_t(id)]) continue;
      const Flow& f = flows_[std::size_t(id)];
      bool stop = f.cap < kInf && f.cap - level <= kEps * f.cap;
      for (int k = 0; k < f.hops && !stop; ++k) {
        const auto c = std::size_t(f.route[k]);
        stop = ch_[c].shared && ch_rem_[c] <= kEps * ch_[c].capacity_bytes_per_s * ch_scale_[c];
      }
      if (stop) freeze(id);
    }
    if (left < left_before) continue;
    // Each round must freeze a flow, or the loop never ends. When rounding (or a
    // capacity past the doubles) leaves every test above short, the flows of the
    // tightest constraint freeze at this level; with no constraint at all, all do.
    for (int id : comp_flows_) {
      if (frozen_[std::size_t(id)]) continue;
      const Flow& f = flows_[std::size_t(id)];
      const bool on_tight = tight_ch >= 0 && std::find(f.route, f.route + f.hops, tight_ch) != f.route + f.hops;
      if (id == tight_flow || on_tight || (tight_ch < 0 && tight_flow < 0)) freeze(id);
    }
  }
}

}  // namespace charm::sim
