#include "topologies/topology.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace charm::topo {

std::string Topology::channel_name(int ch) const {
  const Link& l = channel_link(ch);
  const int from = (ch % 2 == 0) ? l.a : l.b, to = (ch % 2 == 0) ? l.b : l.a;
  return fmt::format("{}->{}", vertex_names[std::size_t(from)], vertex_names[std::size_t(to)]);
}

double Topology::route_latency_us(int src, int dst) const { return latency_us(route(src, dst)); }

double Topology::latency_us(std::span<const std::int32_t> channels) const {
  double us = 0;
  for (auto ch : channels) us += channel_link(ch).latency_us;
  return us;
}

GBps Topology::route_bandwidth_gbps(int src, int dst) const {
  GBps bw = std::numeric_limits<double>::infinity();
  for (auto ch : route(src, dst)) bw = std::min(bw, channel_link(ch).bandwidth_gbps);
  return bw;
}

int Topology::domain_of(int gpu_index) const {
  if (domain_level < 0) return 0;
  // Domains are the distinct prefixes of the placement up to domain_level, numbered in GPU order.
  int d = 0;
  for (int g = 1; g <= gpu_index; ++g) {
    const auto& a = gpu_place[std::size_t(g - 1)];
    const auto& b = gpu_place[std::size_t(g)];
    if (!std::equal(a.begin(), a.begin() + domain_level + 1, b.begin())) ++d;
  }
  return d;
}

std::vector<int> Topology::gpu_domains() const {
  std::vector<int> d(std::size_t(num_gpus_), 0);
  if (domain_level < 0) return d;
  for (int g = 1; g < num_gpus_; ++g) {
    const auto& a = gpu_place[std::size_t(g - 1)];
    const auto& b = gpu_place[std::size_t(g)];
    d[std::size_t(g)] =
        d[std::size_t(g - 1)] + (std::equal(a.begin(), a.begin() + domain_level + 1, b.begin()) ? 0 : 1);
  }
  return d;
}

int Topology::domains() const { return num_gpus_ == 0 ? 0 : domain_of(num_gpus_ - 1) + 1; }

namespace {

constexpr std::array<std::string_view, 6> kKindNames = {"nvlink", "pcie", "host", "nic", "fabric", "unspecified"};

/// Labels of one breadth-first search from a source GPU, layer by layer (a layer
/// is a hop count). Among routes of equal hop count to a vertex, the smaller tie
/// weight wins, then the lower channel ids compared from the source: a vertex's
/// rank within its layer stands for its whole route, so comparing (rank of the
/// previous vertex, last channel) compares two routes lexicographically.
struct Labels {
  std::vector<int> hops;          // -1: not reached
  std::vector<double> weight;     // sum of tie weights along the route
  std::vector<std::int32_t> via;  // the channel the route enters the vertex by
  std::vector<int> rank;          // position of the route within its layer
};

bool tie_weight_less(double a, double b) {
  // Equal sums reached in a different order differ in the last bits; those are ties.
  return a < b - 1e-12 * std::max(std::abs(a), std::abs(b));
}

/// Searches from `src` over the channels whose class is at most `max_class`, never forwarding through another GPU.
void search(const Topology& t, const std::vector<std::vector<std::int32_t>>& out, const std::vector<int>& link_class,
            const std::vector<double>& tie, int src, int max_class, Labels& lb) {
  const auto V = static_cast<std::size_t>(t.num_vertices());
  lb.hops.assign(V, -1);
  lb.weight.assign(V, 0.0);
  lb.via.assign(V, -1);
  lb.rank.assign(V, 0);
  lb.hops[std::size_t(src)] = 0;
  std::vector<int> layer{src}, next;
  for (int depth = 0; !layer.empty(); ++depth) {
    next.clear();
    for (const int u : layer) {
      if (u < t.num_gpus() && u != src) continue;  // a GPU receives, it does not forward
      for (const std::int32_t ch : out[std::size_t(u)]) {
        if (link_class[std::size_t(ch / 2)] > max_class) continue;
        const auto v = std::size_t(t.channel_to(ch));
        if (lb.hops[v] >= 0 && lb.hops[v] <= depth) continue;
        const double w = lb.weight[std::size_t(u)] + tie[std::size_t(ch / 2)];
        if (lb.hops[v] < 0) {
          lb.hops[v] = depth + 1;
          lb.weight[v] = w;
          lb.via[v] = ch;
          next.push_back(int(v));
          continue;
        }
        const double w0 = lb.weight[v];
        const int r = lb.rank[std::size_t(u)], r0 = lb.rank[std::size_t(t.channel_from(lb.via[v]))];
        const bool better = tie_weight_less(w, w0) || (!tie_weight_less(w0, w) && (r != r0 ? r < r0 : ch < lb.via[v]));
        if (better) {
          lb.weight[v] = w;
          lb.via[v] = ch;
        }
      }
    }
    std::sort(next.begin(), next.end(), [&](int a, int b) {
      const int ra = lb.rank[std::size_t(t.channel_from(lb.via[std::size_t(a)]))];
      const int rb = lb.rank[std::size_t(t.channel_from(lb.via[std::size_t(b)]))];
      return ra != rb ? ra < rb : lb.via[std::size_t(a)] < lb.via[std::size_t(b)];
    });
    for (std::size_t i = 0; i < next.size(); ++i) lb.rank[std::size_t(next[i])] = int(i);
    layer.swap(next);
  }
}

}  // namespace

std::string_view to_string(LinkKind k) { return kKindNames[static_cast<std::size_t>(k)]; }

std::optional<LinkKind> link_kind_from(std::string_view s) {
  for (std::size_t i = 0; i + 1 < kKindNames.size(); ++i)
    if (kKindNames[i] == s) return static_cast<LinkKind>(i);
  return std::nullopt;
}

LinkKind Topology::route_kind(int src, int dst) const {
  const auto r = route(src, dst);
  if (r.empty()) return LinkKind::Unspecified;
  LinkKind k = channel_link(r.front()).kind;
  for (auto ch : r) k = std::max(k, channel_link(ch).kind);
  return k;
}

/// The route search of finalize: link classes and tie weights, the channels out of each vertex, and
/// the state reused source after source. from(s, dests, skip): path[d] is the chosen route to every
/// d < dests (routed[d] = 0: unreachable); pairs that `skip` names are not searched for.
struct Topology::RouteSearch {
  const Topology& t;
  std::vector<int> link_class;
  std::vector<double> tie;
  std::vector<int> classes;
  std::vector<std::vector<std::int32_t>> out;
  Labels lb;
  std::vector<std::vector<std::int32_t>> path;
  std::vector<char> routed;

  template <class Skip>
  void from(std::size_t s, std::size_t dests, Skip&& skip) {
    path.resize(dests);
    routed.assign(dests, 0);
    std::size_t left = 0;
    for (std::size_t d = 0; d < dests; ++d) {
      routed[d] = d == s || skip(s, d);
      left += routed[d] ? 0 : 1;
      path[d].clear();
    }
    for (const int c : classes) {
      if (left == 0) break;
      search(t, out, link_class, tie, int(s), c, lb);
      for (std::size_t d = 0; d < dests; ++d) {
        if (routed[d] || lb.hops[d] < 0) continue;
        for (auto v = d; v != s; v = std::size_t(t.channel_from(lb.via[v]))) path[d].push_back(lb.via[v]);
        std::reverse(path[d].begin(), path[d].end());
        routed[d] = 1;
        --left;
      }
    }
  }
};

/// Rank r runs on GPU r and charm's domains are runs of consecutive ranks, so a domain that comes
/// back after another one would be counted twice (and planned as two).
Status Topology::check_domain_order(const std::string& where) const {
  if (domain_level < 0 || gpu_place.empty()) return {};
  std::vector<std::vector<int>> seen;
  for (std::size_t g = 0; g < std::size_t(num_gpus_) && g < gpu_place.size(); ++g) {
    std::vector<int> prefix(gpu_place[g].begin(), gpu_place[g].begin() + domain_level + 1);
    if (!seen.empty() && seen.back() == prefix) continue;
    if (std::find(seen.begin(), seen.end(), prefix) != seen.end())
      return Error{
          where,
          fmt::format(
              "gpus[{}] ({}) is in {} {} again after another {}: number the GPUs {} by {} (rank r runs on GPU r, "
              "and charm's domains are runs of consecutive ranks)",
              g, vertex_names[g], levels.empty() ? "domain" : levels[std::size_t(domain_level)], prefix.back(),
              levels.empty() ? "domain" : levels[std::size_t(domain_level)],
              levels.empty() ? "domain" : levels[std::size_t(domain_level)],
              levels.empty() ? "domain" : levels[std::size_t(domain_level)])};
    seen.push_back(std::move(prefix));
  }
  return {};
}

/// The search's link classes (by kind, or one class with tie weights) and the channels out of each vertex.
Status Topology::classify_links(const std::string& where, RouteSearch& rs) const {
  // Kinds are all or none: a kind compared with no kind has no meaning.
  const auto unkinded =
      std::find_if(links.begin(), links.end(), [](const Link& l) { return l.kind == LinkKind::Unspecified; });
  const auto kinded =
      std::find_if(links.begin(), links.end(), [](const Link& l) { return l.kind != LinkKind::Unspecified; });
  if (unkinded != links.end() && kinded != links.end())
    return Error{where,
                 fmt::format("link {} ({}<->{}) has no kind but link {} has \"{}\": give every link a kind or none",
                             unkinded - links.begin(), vertex_names[std::size_t(unkinded->a)],
                             vertex_names[std::size_t(unkinded->b)], kinded - links.begin(), to_string(kinded->kind))};
  const bool by_kind = kinded != links.end();
  // With kinds, a route's cost is (least preferred kind on it, hops, channel ids):
  // searching once per kind class, with only the links of that class or a
  // preferred one, finds each GPU first at its best class, by fewest hops.
  //
  // A file that declares no kinds says nothing about transports, so every link
  // is of one class and the fewest hops win. Routes of equal hop count are then
  // told apart by the weight routes were chosen by before kinds existed
  // (latency_us + the time of 1 MB, per link): the only hint such a file gives,
  // e.g. an NVSwitch and a NIC both two hops away. For trees (a PCIe switch per
  // GPU group under host bridges, as the L20 machines, a star) there is one
  // route per pair and numbers play no part; declaring kinds removes them from
  // the choice everywhere.
  rs.link_class.assign(links.size(), 0);
  rs.tie.assign(links.size(), 0.0);
  for (std::size_t i = 0; i < links.size(); ++i) {
    if (by_kind)
      rs.link_class[i] = static_cast<int>(links[i].kind);
    else
      rs.tie[i] = links[i].latency_us + 1000.0 / links[i].bandwidth_gbps;
  }
  rs.classes = rs.link_class;
  std::sort(rs.classes.begin(), rs.classes.end());
  rs.classes.erase(std::unique(rs.classes.begin(), rs.classes.end()), rs.classes.end());
  // Channels leaving each vertex, in increasing id.
  rs.out.assign(std::size_t(num_vertices()), {});
  for (std::size_t i = 0; i < links.size(); ++i) {
    rs.out[std::size_t(links[i].a)].push_back(std::int32_t(2 * i));
    rs.out[std::size_t(links[i].b)].push_back(std::int32_t(2 * i + 1));
  }
  return {};
}

/// Checks `route_overrides` (here too, for topologies built in code rather than read from a file) and
/// installs them, a later override of a pair replacing an earlier one.
Status Topology::install_overrides(const std::string& where) {
  const auto n = static_cast<std::size_t>(num_gpus_);
  std::vector<std::pair<std::uint64_t, std::size_t>> overrides;
  for (std::size_t k = 0; k < route_overrides.size(); ++k) {
    const RouteOverride& o = route_overrides[k];
    const auto bad = [&](const std::string& what) {
      return Error{where, fmt::format("route override {}: {}", k, what)};
    };
    if (o.src < 0 || o.dst < 0 || std::size_t(o.src) >= n || std::size_t(o.dst) >= n || o.src == o.dst)
      return bad(fmt::format("needs two different GPUs, got {} and {}", o.src, o.dst));
    if (o.channels.empty() || o.channels.size() > std::size_t(kMaxHops))
      return bad(fmt::format("has {} hops; a route has 1 to {}", o.channels.size(), kMaxHops));
    int at = o.src;
    for (const auto ch : o.channels) {
      if (ch < 0 || ch >= num_channels() || channel_from(ch) != at) return bad("its channels do not form a path");
      at = channel_to(ch);
      if (at != o.dst && std::size_t(at) < n)
        return bad(fmt::format("passes through GPU {}", vertex_names[std::size_t(at)]));
    }
    if (at != o.dst) return bad("its channels do not end at its destination");
    overrides.emplace_back(std::uint64_t(o.src) * n + std::uint64_t(o.dst), k);
  }
  // A later override of the same pair replaces an earlier one.
  std::stable_sort(overrides.begin(), overrides.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  override_key_.clear();
  override_route_.clear();
  for (std::size_t i = 0; i < overrides.size(); ++i) {
    if (i + 1 < overrides.size() && overrides[i + 1].first == overrides[i].first) continue;
    override_key_.push_back(overrides[i].first);
    override_route_.emplace_back(route_overrides[overrides[i].second].channels);
  }
  return {};
}

/// By block: the routes from the first block to the first two stand for all. False (and no routes
/// kept) where the topology has no block structure or a pair they cannot route (none in the clusters
/// the builders make): the table's search then names the pair.
bool Topology::route_by_block(RouteSearch& rs) {
  by_block_ = false;
  if (!check_blocks(rs.link_class, rs.tie)) return false;
  layout_ = blocks;
  const auto g = std::size_t(blocks.gpus), dests = 2 * g;
  route_begin_.assign(g * dests + 1, 0);
  bool ok = true;
  for (std::size_t s = 0; s < g && ok; ++s) {
    rs.from(s, dests, [](std::size_t, std::size_t) { return false; });
    for (std::size_t d = 0; d < dests; ++d) {
      if (d != s) {
        if (!rs.routed[d] || rs.path[d].size() > std::size_t(kMaxHops))
          ok = false;
        else
          route_ch_.insert(route_ch_.end(), rs.path[d].begin(), rs.path[d].end());
      }
      route_begin_[s * dests + d + 1] = static_cast<std::uint32_t>(route_ch_.size());
    }
  }
  by_block_ = ok;
  // The routes from block 0 to block 1 stand for all: a channel index repeated modulo the block's channels
  // would be one channel of two blocks' copies.
  block_routes_once_ = ok;
  for (std::size_t s = 0; s < g && ok; ++s)
    for (auto d = g; d < dests; ++d) {
      std::vector<std::int32_t> local;
      for (auto k = route_begin_[s * dests + d]; k < route_begin_[s * dests + d + 1]; ++k)
        local.push_back(route_ch_[k] % (2 * blocks.links));
      std::sort(local.begin(), local.end());
      if (std::adjacent_find(local.begin(), local.end()) != local.end()) block_routes_once_ = false;
    }
  if (ok) return true;
  route_begin_.clear();
  route_ch_.clear();
  return false;
}

/// The table: a route per GPU pair (overridden pairs excepted).
Status Topology::route_table(RouteSearch& rs, const std::string& where) {
  const auto n = static_cast<std::size_t>(num_gpus_);
  // The table holds a route per GPU pair: beyond 4096 GPUs that alone is gigabytes.
  if (n > 4096)
    return Error{
        where,
        fmt::format("{} GPUs: routes without a block structure are a table of every GPU pair, kept to 4096 GPUs", n)};
  route_begin_.assign(n * n + 1, 0);
  for (std::size_t s = 0; s < n; ++s) {
    rs.from(s, n, [&](std::size_t a, std::size_t b) { return override_index(int(a), int(b)) >= 0; });
    for (std::size_t d = 0; d < n; ++d) {
      const std::size_t idx = s * n + d;
      if (d != s && override_index(int(s), int(d)) < 0) {
        if (!rs.routed[d])
          return Error{where, fmt::format("no route from GPU {} ({}) to GPU {} ({}): GPU {} is unreachable", s,
                                          vertex_names[s], d, vertex_names[d], vertex_names[d])};
        if (rs.path[d].size() > std::size_t(kMaxHops))
          return Error{where, fmt::format("route from {} to {} has {} hops, more than the {} supported",
                                          vertex_names[s], vertex_names[d], rs.path[d].size(), kMaxHops)};
        route_ch_.insert(route_ch_.end(), rs.path[d].begin(), rs.path[d].end());
      }
      route_begin_[idx + 1] = static_cast<std::uint32_t>(route_ch_.size());
    }
  }
  return {};
}

Status Topology::finalize(int num_gpus, const std::string& where) {
  num_gpus_ = num_gpus;
  if (auto st = check_domain_order(where); !st) return st;
  RouteSearch rs{*this, {}, {}, {}, {}, {}, {}, {}};
  if (auto st = classify_links(where, rs); !st) return st;
  if (auto st = install_overrides(where); !st) return st;
  route_begin_.clear();
  route_ch_.clear();
  if (route_by_block(rs)) return {};
  return route_table(rs, where);
}

int Topology::override_index(int src, int dst) const {
  if (override_key_.empty()) return -1;
  const std::uint64_t key = std::uint64_t(src) * std::uint64_t(num_gpus_) + std::uint64_t(dst);
  const auto it = std::lower_bound(override_key_.begin(), override_key_.end(), key);
  return it != override_key_.end() && *it == key ? int(it - override_key_.begin()) : -1;
}

Route Topology::route(int src, int dst) const {
  if (const int k = override_index(src, dst); k >= 0) return override_route_[std::size_t(k)];
  Route r;
  if (!by_block_) {
    const auto i = std::size_t(src) * std::size_t(num_gpus_) + std::size_t(dst);
    for (auto k = route_begin_[i]; k < route_begin_[i + 1]; ++k) r.push_back(route_ch_[k]);
    return r;
  }
  // The route between blocks 0 and 1 (or within block 0), moved to the blocks of src and dst.
  const int g = layout_.gpus, a = src / g, b = dst / g;
  const auto i = std::size_t(src - a * g) * std::size_t(2 * g) + std::size_t(a == b ? dst - b * g : g + dst - b * g);
  const std::int32_t L = layout_.links;
  const std::int32_t shift[2] = {2 * a * L, 2 * (b - 1) * L};
  for (auto k = route_begin_[i]; k < route_begin_[i + 1]; ++k) {
    const std::int32_t ch = route_ch_[k];
    r.push_back(ch + shift[ch / 2 >= L ? 1 : 0]);
  }
  return r;
}

bool Topology::check_blocks(const std::vector<int>& link_class, const std::vector<double>& tie) const {
  const BlockLayout& B = blocks;
  const long G = num_gpus_, V = num_vertices();
  if (B.count < 2 || B.gpus < 1 || B.links < 1 || B.vertices < 0) return false;
  if (long(B.count) * B.gpus != G || long(B.count) * B.links != long(links.size())) return false;
  if (B.first_vertex < G || long(B.first_vertex) + long(B.count) * B.vertices > V) return false;
  // The block of a vertex (-1: shared), and a vertex of block 0 moved to block b.
  const auto block_of = [&](long v) -> long {
    if (v < G) return v / B.gpus;
    if (v >= B.first_vertex && v < long(B.first_vertex) + long(B.count) * B.vertices)
      return (v - B.first_vertex) / B.vertices;
    return -1;
  };
  const auto moved = [&](long v, long b) -> long {
    if (v < G) return v + b * B.gpus;
    if (block_of(v) >= 0) return v + b * B.vertices;
    return v;
  };
  for (std::size_t i = 0; i < links.size(); ++i) {
    const long b = long(i) / B.links;
    const Link& l = links[i];
    const Link& l0 = links[i - std::size_t(b * B.links)];
    const long ba = block_of(l.a), bb = block_of(l.b);
    // A link joins its block to itself or to a shared vertex, never two shared vertices...
    if ((ba != b && ba != -1) || (bb != b && bb != -1) || (ba == -1 && bb == -1)) return false;
    // ... and is a copy of the first block's link at its place.
    if (moved(l0.a, b) != l.a || moved(l0.b, b) != l.b) return false;
    if (link_class[i] != link_class[i - std::size_t(b * B.links)] || tie[i] != tie[i - std::size_t(b * B.links)])
      return false;
  }
  // No route passes through a third block: within the first block, the switches
  // joined to each other (not through a GPU, which never forwards) reach shared
  // vertices by one link at most.
  std::vector<long> comp(std::size_t(B.vertices));
  for (long k = 0; k < B.vertices; ++k) comp[std::size_t(k)] = k;
  const auto find = [&](long k) {
    while (comp[std::size_t(k)] != k) k = comp[std::size_t(k)] = comp[std::size_t(comp[std::size_t(k)])];
    return k;
  };
  const auto is_switch0 = [&](long v) { return v >= G && block_of(v) == 0; };
  for (long i = 0; i < B.links; ++i) {
    const Link& l = links[std::size_t(i)];
    if (is_switch0(l.a) && is_switch0(l.b)) comp[std::size_t(find(l.a - B.first_vertex))] = find(l.b - B.first_vertex);
  }
  std::vector<int> ports(std::size_t(B.vertices), 0);
  for (long i = 0; i < B.links; ++i) {
    const Link& l = links[std::size_t(i)];
    for (const auto& [x, y] : {std::pair{l.a, l.b}, std::pair{l.b, l.a}})
      if (is_switch0(x) && block_of(y) == -1 && ++ports[std::size_t(find(x - B.first_vertex))] > 1) return false;
  }
  return true;
}

std::string implausible(Quantity q, double x, std::string_view field) {
  if (!std::isfinite(x)) return fmt::format("must be a finite number, got {}", x);
  switch (q) {
  case Quantity::Bandwidth:
    if (!(x > 0)) return fmt::format("must be > 0, got {}", x);
    if (x < kMinGbps) return fmt::format("must be >= {:g} GB/s (1 MB/s), got {}", kMinGbps, x);
    if (x > kMaxGbps)
      return fmt::format("must be <= {:g} GB/s, got {}: {} is in GB/s (1e9 bytes/s), not bytes/s or bits/s", kMaxGbps,
                         x, field);
    return {};
  case Quantity::Tflops:
    if (!(x > 0)) return fmt::format("must be > 0, got {}", x);
    if (x < kMinTflops) return fmt::format("must be >= {:g} TFLOP/s (1 GFLOP/s), got {}", kMinTflops, x);
    // Up to 1e19 the number is most likely a peak in FLOP/s.
    if (x > kMaxTflops)
      return x <= kMaxTflops * 1e12
                 ? fmt::format("must be <= {:g} TFLOP/s, got {}: {} looks like FLOP/s; {} is in TFLOP/s (1e12 FLOP/s)",
                               kMaxTflops, x, x, field)
                 : fmt::format("must be <= {:g} TFLOP/s, got {}: {} is in TFLOP/s (1e12 FLOP/s)", kMaxTflops, x, field);
    return {};
  case Quantity::Latency:
    if (!(x >= 0)) return fmt::format("must be >= 0, got {}", x);
    if (x > kMaxLatencyUs)
      return fmt::format("must be <= {:g} us (one second), got {}: {} is in microseconds", kMaxLatencyUs, x, field);
    return {};
  case Quantity::Efficiency:
    if (!(x > 0)) return fmt::format("must be > 0, got {}", x);
    if (x > 1) return fmt::format("must be <= 1, got {}", x);
    if (x < kMinEfficiency) return fmt::format("must be >= {:g} (a fraction of peak), got {}", kMinEfficiency, x);
    return {};
  case Quantity::HalfTokens:
    if (!(x >= 0)) return fmt::format("must be >= 0, got {}", x);
    if (x > kMaxHalfTokens) return fmt::format("must be <= {:g} tokens, got {}", kMaxHalfTokens, x);
    return {};
  }
  return {};
}

std::string ModelSources::line() const {
  std::string s = fmt::format("kernel {}; stack {}; links {}", kernel, stack, links);
  if (!assumed.empty()) s += fmt::format("; assumed: {}", fmt::join(assumed, "; "));
  return s;
}

Topology make_uniform(int gpus, GBps bw_gbps, double tflops, double latency_us, GBps hbm_gbps) {
  Topology t;
  t.sources.kernel = "ideal: every kernel at 100% of the given peak (--uniform)";
  t.sources.stack = "none (ideal: no framework costs; --uniform)";
  t.sources.links = fmt::format("uniform {} GB/s, contention-free (--uniform)", bw_gbps);
  t.name = fmt::format("uniform-{}x{}GBps", gpus, bw_gbps);
  t.notes = "contention-free, fully connected: dedicated links, no port limit (the setting of the paper's formulas)";
  t.uniform = true;
  t.gpu.model = "uniform";
  t.gpu.tflops_bf16 = t.gpu.tflops_fp16 = t.gpu.tflops_fp32 = tflops;
  t.gpu.hbm_gbps = hbm_gbps;
  for (int g = 0; g < gpus; ++g) {
    t.vertex_names.push_back(fmt::format("gpu{}", g));
    t.gpu_place.push_back({g});
  }
  t.levels = {"gpu"};
  t.vertex_names.push_back("fabric");
  for (int g = 0; g < gpus; ++g)
    t.links.push_back(Link{g, gpus, bw_gbps, latency_us / 2, Sharing::Dedicated, 0, 0, {}, LinkKind::Unspecified});
  // Each GPU with its link is a block; the switch is shared.
  t.blocks = {gpus, 1, 1, gpus + 1, 0};
  auto s = t.finalize(gpus, "uniform");
  CHARM_ASSERT(s.ok(), "a uniform topology always routes");
  return t;
}

}  // namespace charm::topo
