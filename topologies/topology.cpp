#include "topologies/topology.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/dijkstra_shortest_paths.hpp>
#include <map>

namespace charm::topo {

std::string Topology::channel_name(int ch) const {
  const Link& l = channel_link(ch);
  const int from = (ch % 2 == 0) ? l.a : l.b, to = (ch % 2 == 0) ? l.b : l.a;
  return fmt::format("{}->{}", vertex_names[std::size_t(from)], vertex_names[std::size_t(to)]);
}

double Topology::route_latency_us(int src, int dst) const {
  double us = 0;
  for (auto ch : route(src, dst)) us += channel_link(ch).latency_us;
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

int Topology::domains() const { return num_gpus_ == 0 ? 0 : domain_of(num_gpus_ - 1) + 1; }

Status Topology::finalize(int num_gpus, const std::string& where) {
  num_gpus_ = num_gpus;
  const int V = num_vertices();
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS, boost::no_property,
                                      boost::property<boost::edge_weight_t, double, boost::property<boost::edge_index_t, int>>>;
  Graph g(static_cast<std::size_t>(V));
  // Weight: one hop, plus latency, plus the time of a 1 MB message, so that a
  // route through fast links wins over an equally short one through a NIC.
  for (std::size_t i = 0; i < links.size(); ++i) {
    const Link& l = links[i];
    const double w = 1.0 + l.latency_us + 1000.0 / l.bandwidth_gbps;
    boost::add_edge(std::size_t(l.a), std::size_t(l.b), {w, int(2 * i)}, g);
    boost::add_edge(std::size_t(l.b), std::size_t(l.a), {w, int(2 * i + 1)}, g);
  }
  // GPUs only forward traffic through switches, never through other GPUs:
  // routes may not pass a GPU vertex, which we enforce by checking the path.
  const auto n = static_cast<std::size_t>(num_gpus);
  route_begin_.assign(n * n + 1, 0);
  route_ch_.clear();
  std::vector<Graph::vertex_descriptor> pred(static_cast<std::size_t>(V));
  std::vector<double> dist(static_cast<std::size_t>(V));
  std::vector<int> pred_ch(static_cast<std::size_t>(V));
  auto eidx = boost::get(boost::edge_index, g);
  // Remove GPU->X edges of non-source GPUs by running Dijkstra on a filtered weight:
  // edges leaving a GPU other than the source get infinite weight.
  for (std::size_t s = 0; s < n; ++s) {
    auto wmap = boost::get(boost::edge_weight, g);
    std::vector<double> w(boost::num_edges(g));
    boost::graph_traits<Graph>::edge_iterator ei, ee;
    for (std::tie(ei, ee) = boost::edges(g); ei != ee; ++ei) {
      const auto u = boost::source(*ei, g);
      w[std::size_t(eidx[*ei])] = (u < n && u != s) ? 1e30 : wmap[*ei];
    }
    auto wprop = boost::make_iterator_property_map(w.begin(), eidx);
    boost::dijkstra_shortest_paths(g, s, boost::weight_map(wprop).predecessor_map(pred.data()).distance_map(dist.data()));
    for (std::size_t d = 0; d < n; ++d) {
      const std::size_t idx = s * n + d;
      if (d != s) {
        if (pred[d] == d || dist[d] >= 1e29)
          return Error{where, fmt::format("no route from GPU {} ({}) to GPU {} ({}): GPU {} is unreachable",
                                          s, vertex_names[s], d, vertex_names[d], vertex_names[d])};
        std::vector<std::int32_t> path;
        for (auto v = d; v != s; v = pred[v]) {
          // Find the cheapest edge pred[v] -> v (parallel links: the first with the minimal weight).
          double best = 1e300;
          int best_ch = -1;
          boost::graph_traits<Graph>::out_edge_iterator oi, oe;
          for (std::tie(oi, oe) = boost::out_edges(pred[v], g); oi != oe; ++oi)
            if (boost::target(*oi, g) == v && w[std::size_t(eidx[*oi])] < best) {
              best = w[std::size_t(eidx[*oi])];
              best_ch = eidx[*oi];
            }
          path.push_back(best_ch);
        }
        if (path.size() > std::size_t(kMaxHops))
          return Error{where, fmt::format("route from {} to {} has {} hops, more than the {} supported",
                                          vertex_names[s], vertex_names[d], path.size(), kMaxHops)};
        route_ch_.insert(route_ch_.end(), path.rbegin(), path.rend());
      }
      route_begin_[idx + 1] = static_cast<std::uint32_t>(route_ch_.size());
    }
  }
  (void)pred_ch;
  return {};
}

Topology make_uniform(int gpus, GBps bw_gbps, double tflops, double latency_us, GBps hbm_gbps) {
  Topology t;
  t.name = fmt::format("uniform-{}x{}GBps", gpus, bw_gbps);
  t.notes = "contention-free, fully connected: dedicated links, no port limit (the setting of the paper's formulas)";
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
    t.links.push_back(Link{g, gpus, bw_gbps, latency_us / 2, Sharing::Dedicated, 0, 0, {}});
  auto s = t.finalize(gpus, "uniform");
  CHARM_ASSERT(s.ok(), "a uniform topology always routes");
  return t;
}

} // namespace charm::topo
