#include "sim/explain.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "scheduler/ir/op_args.hpp"
#include "sim/simulator.hpp"

namespace charm::sim {

using namespace charm::ir;

namespace {

std::string class_of(topo::LinkKind k) {
  return k == topo::LinkKind::Unspecified ? "link" : std::string(topo::to_string(k));
}

bool is_memory_op(OpKind k) { return k == OpKind::Merge || k == OpKind::Accumulate || k == OpKind::Copy; }

std::string percent(double x) { return x > 0 && x < 0.005 ? std::string("<1%") : fmt::format("{:.0f}%", 100 * x); }

/// What a channel carries, per buffer kind of the messages crossing it, largest first.
std::vector<KindTraffic> channel_traffic(const Plan& plan, const topo::Topology& t, int channel) {
  std::map<BufKind, KindTraffic> by_kind;
  // A quotient plan's sends stand for their images: those crossing the channel cross its representative.
  const RankSymmetry& sym = plan.symmetry;
  const int target = representative_channel(t, sym, channel);
  for (const Op& o : plan.ops()) {
    if (o.kind != OpKind::Send) continue;
    const auto route = t.route(plan.gpu_of(o.rank), plan.gpu_of(o.peer));
    if (std::none_of(route.begin(), route.end(), [&](int c) { return representative_channel(t, sym, c) == target; }))
      continue;
    const BufKind kind = plan.buffer(std::get<SendArgs>(args(o)).src).kind;
    auto& k = by_kind[kind];
    k.kind = kind;
    ++k.messages;
    k.bytes += double(o.bytes);
  }
  std::vector<KindTraffic> v;
  for (auto& [kind, k] : by_kind) v.push_back(k);
  std::sort(v.begin(), v.end(), [](const KindTraffic& a, const KindTraffic& b) { return a.bytes > b.bytes; });
  return v;
}

std::string traffic_text(const std::vector<KindTraffic>& traffic, const Workload& w) {
  std::string s = "carries ";
  for (std::size_t i = 0; i < traffic.size() && i < 3; ++i) {
    const auto& k = traffic[i];
    if (i > 0) s += i == 1 ? " vs " : ", ";
    s += fmt::format("{} {} x {}", to_string(k.kind), k.messages, human_bytes(k.bytes / std::max(1, k.messages)));
  }
  // Query-side data (Q, the backward bundle, partial O and dQ) scales with the query
  // heads, KV with the kv heads: under GQA a schedule that moves queries moves more.
  const bool moves_queries = std::any_of(traffic.begin(), traffic.end(), [](const KindTraffic& k) {
    return k.kind == BufKind::Q || k.kind == BufKind::QBundle || k.kind == BufKind::Out || k.kind == BufKind::Dq;
  });
  const double ratio = double(w.heads) / double(2 * w.kv_heads);
  if (moves_queries && w.kv_heads < w.heads && ratio > 1)
    s += fmt::format(" (GQA {}:1: a query shard is {:.1f}x a KV shard)", w.heads / w.kv_heads, ratio);
  return s;
}

}  // namespace

std::string human_bytes(double bytes) {
  static constexpr std::array<const char*, 6> units = {"B", "kB", "MB", "GB", "TB", "PB"};
  std::size_t u = 0;
  while (bytes >= 1000 && u + 1 < units.size()) {
    bytes /= 1000;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  return fmt::format("{:.3g} {}", bytes, units[u]);
}

std::string Bottleneck::line() const {
  std::string who = channel < 0                ? fmt::format("{} (rank {})", resource_class, rank)
                    : resource_class == "link" ? fmt::format("link {}", resource)
                                               : fmt::format("{} link {}", resource_class, resource);
  if (!saturated)
    return fmt::format("latency/dependency bound: no resource saturated (busiest: {} at {}); {}", who,
                       percent(utilisation), figure);
  return fmt::format("{} {} busy: {}", who, percent(utilisation), figure);
}

std::string Bottleneck::brief() const {
  std::string s = fmt::format("{} {}", resource_class, percent(utilisation));
  if (!traffic.empty()) s += fmt::format(" {}", to_string(traffic.front().kind));
  return saturated ? s : fmt::format("latency ({})", s);
}

namespace {

/// The busier of the ranks' compute kernels and memory-bound ops (the busiest rank of each).
Bottleneck rank_bottleneck(const Plan& plan, const SimResult& r, Seconds span) {
  // Per-rank busy time and work of the compute kernels and of the memory-bound ops.
  std::vector<Seconds> compute_s(std::size_t(plan.ranks), 0), memory_s(std::size_t(plan.ranks), 0);
  std::vector<double> flops(std::size_t(plan.ranks), 0), mem_bytes(std::size_t(plan.ranks), 0);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const Op& o = plan.op(OpId(i));
    const Seconds d = r.end_s[i] - r.start_s[i];
    if (o.kind == OpKind::Compute) {
      compute_s[std::size_t(o.rank)] += d;
      flops[std::size_t(o.rank)] += double(o.flops);
    } else if (is_memory_op(o.kind)) {
      memory_s[std::size_t(o.rank)] += d;
      mem_bytes[std::size_t(o.rank)] += double(o.bytes);
    }
  }
  Bottleneck best;
  auto busiest_rank = [](const std::vector<Seconds>& v) {
    return int(std::max_element(v.begin(), v.end()) - v.begin());
  };
  {
    const int rk = busiest_rank(compute_s);
    const double eff = compute_s[std::size_t(rk)] > 0 ? flops[std::size_t(rk)] / compute_s[std::size_t(rk)] : 0;
    best = {"compute",
            "compute",
            compute_s[std::size_t(rk)] / span,
            rk,
            false,
            {},
            fmt::format("{:.3g} TFLOP of attention in {:.3f} ms on rank {} ({:.0f} TFLOP/s attained)",
                        flops[std::size_t(rk)] / 1e12, compute_s[std::size_t(rk)] * 1e3, rk, eff / 1e12)};
  }
  const int rk = busiest_rank(memory_s);
  const double u = memory_s[std::size_t(rk)] / span;
  if (u > best.utilisation)
    best = {"memory",
            "memory",
            u,
            rk,
            false,
            {},
            fmt::format("merges, accumulates and copies move {} in {:.3f} ms on rank {}",
                        human_bytes(mem_bytes[std::size_t(rk)]), memory_s[std::size_t(rk)] * 1e3, rk)};
  return best;
}

/// The busiest link channel if it is busier than `best` (ties to the slower link), with its traffic.
void channel_bottleneck(const Plan& plan, const SimResult& r, const topo::Topology& t, Seconds span, Bottleneck& best) {
  int best_channel = -1;
  for (std::size_t c = 0; c < r.channels.size(); ++c) {
    const auto& ch = r.channels[c];
    if (ch.bytes <= 0) continue;
    const double u = ch.busy_s / span;
    // Ties go to the slower link: it is the one a faster network would relieve first.
    if (u > best.utilisation + 1e-12 ||
        (best_channel >= 0 && std::abs(u - best.utilisation) <= 1e-12 &&
         t.channel_link(int(c)).bandwidth_gbps < t.channel_link(best_channel).bandwidth_gbps)) {
      best_channel = int(c);
      const auto& l = t.channel_link(int(c));
      best = {t.channel_name(int(c)), class_of(l.kind), u, 0, false, {}, {}, int(c)};
      // What the link could carry: a shared link divides its bandwidth among its flows; a
      // dedicated one gives each flow its per-flow rate, up to the GPU's injection limit.
      const double avg = ch.bytes / std::max(ch.busy_s, 1e-30) / 1e9;
      if (l.sharing == topo::Sharing::Shared) {
        best.figure = fmt::format("{:.1f} GB/s while busy, of {:.1f} GB/s shared by up to {} flows", avg,
                                  l.bandwidth_gbps, ch.max_flows);
      } else {
        const double per_flow = l.per_flow_gbps > 0 ? std::min(l.per_flow_gbps, l.bandwidth_gbps) : l.bandwidth_gbps;
        best.figure =
            fmt::format("{:.1f} GB/s while busy, {:.1f} GB/s per flow, up to {} flows{}", avg, per_flow, ch.max_flows,
                        l.injection_gbps > 0 ? fmt::format(", {:.1f} GB/s injection limit", l.injection_gbps) : "");
      }
    }
  }
  if (best.channel >= 0) {
    best.traffic = channel_traffic(plan, t, best_channel);
    best.figure = traffic_text(best.traffic, plan.workload) + "; " + best.figure;
  }
}

/// The critical path's time by class, largest first.
void path_shares(const Plan& plan, const SimResult& r, const topo::Topology& t, Seconds span, Explanation& e) {
  // The critical path, op by op: transfers by the transport of their route, the
  // time before a transfer's rendezvous and gaps between ops as waiting, or as the
  // host's where the op started the moment the stack's host thread issued it.
  std::map<std::string, Seconds> share;
  const std::vector<Seconds> host = host_issue_times(plan, t.stack.host_us * 1e-6);
  Seconds prev_end = 0;
  for (std::size_t k = 0; k < r.critical_path.size(); ++k) {
    const OpId id = r.critical_path[k];
    const Op& o = plan.op(id);
    const auto i = std::size_t(id);
    Seconds start = std::max(r.start_s[i], prev_end);
    if (r.start_s[i] > prev_end) {
      const bool host_bound = !host.empty() && std::abs(r.start_s[i] - host[i]) <= 1e-12 * std::max(1.0, host[i]);
      share[host_bound ? "host" : "wait"] += r.start_s[i] - prev_end;
    }
    if (o.kind == OpKind::Send || o.kind == OpKind::Recv) {
      const Seconds flow = std::max(start, r.critical_flow_start_s[k]);
      share["wait"] += flow - start;
      start = flow;
      // Ranks run on the GPUs the plan places them on (a --gpus map, a layout's group): their route is those GPUs'.
      const int src = o.kind == OpKind::Send ? o.rank : o.peer, dst = o.kind == OpKind::Send ? o.peer : o.rank;
      share[class_of(t.route_kind(plan.gpu_of(src), plan.gpu_of(dst)))] += std::max(0.0, r.end_s[i] - start);
    } else {
      share[o.kind == OpKind::Compute ? "compute" : "memory"] += std::max(0.0, r.end_s[i] - start);
    }
    prev_end = std::max(prev_end, r.end_s[i]);
  }
  if (span > prev_end) share["wait"] += span - prev_end;
  for (auto& [what, s] : share)
    if (s > 0) e.path.push_back({what, s});
  std::sort(e.path.begin(), e.path.end(), [](const PathShare& a, const PathShare& b) { return a.seconds > b.seconds; });
}

}  // namespace

Explanation explain(const Plan& plan, const SimResult& r, const topo::Topology& t) {
  Explanation e;
  const Seconds span = r.makespan_s;
  if (span <= 0) {
    e.bottleneck = {"none", "none", 0, 0, false, {}, "nothing ran"};
    return e;
  }
  Bottleneck best = rank_bottleneck(plan, r, span);
  channel_bottleneck(plan, r, t, span, best);
  best.saturated = best.utilisation >= kSaturated;
  e.bottleneck = std::move(best);
  path_shares(plan, r, t, span, e);
  if (!r.critical_path.empty()) {
    e.first_op = r.critical_path.front();
    e.last_op = r.critical_path.back();
  }
  return e;
}

std::string path_shares_text(const std::vector<PathShare>& path, Seconds makespan) {
  std::string s;
  for (const auto& p : path) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {}", percent(makespan > 0 ? p.seconds / makespan : 0), p.what);
  }
  return s.empty() ? "empty" : s;
}

MemoryVerdict memory_verdict(Bytes peak_bytes, double reserved_gb, const topo::GpuSpec& gpu) {
  MemoryVerdict v;
  v.known = gpu.memory_gb > 0;
  v.buffers_gb = double(peak_bytes) / 1e9;
  v.reserved_gb = reserved_gb;
  v.need_gb = v.buffers_gb + reserved_gb;
  v.have_gb = gpu.memory_gb;
  v.fits = !v.known || v.need_gb <= v.have_gb;
  return v;
}

std::string MemoryVerdict::line() const {
  if (!known) return "unknown: the topology gives no gpu.memory_gb";
  const std::string need =
      reserved_gb > 0 ? fmt::format("{:.2f} GB of attention buffers + {:g} GB reserved", buffers_gb, reserved_gb)
                      : fmt::format("{:.2f} GB of attention buffers", buffers_gb);
  return fmt::format("{}: {} of {:g} GB per GPU", fits ? "fits" : "DOES NOT FIT", need, have_gb);
}

}  // namespace charm::sim
