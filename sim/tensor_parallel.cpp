#include "sim/tensor_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "sim/fair_share_network.hpp"
#include "topologies/gpu_arch.hpp"

namespace charm::sim {

namespace {

/// One ring step of every TP group at once: the slowest flow's rate and route, as max-min fair sharing gives it.
struct RingStep {
  double rate_bytes_per_s = 0;
  double latency_s = 0;  // the longest route's link latencies
  std::string link;      // the slowest flow's narrowest link kind
};

/// A link as a collective sees it: its capacity and sharing, without the per-flow cap of one
/// point-to-point transfer (a ring collective drives several channels per peer), the injection limit kept.
FairShareNetwork::Channel collective_channel(const topo::Link& l) {
  FairShareNetwork::Channel c = FairShareNetwork::channel_of(l);
  c.flow_cap_bytes_per_s = l.injection_gbps > 0 ? l.bandwidth_gbps * 1e9 : FairShareNetwork::kInf;
  return c;
}

RingStep ring_step(const std::vector<TpBlock::Flow>& ring, const topo::Topology& t) {
  std::vector<FairShareNetwork::Channel> chans(std::size_t(t.num_channels()));
  for (int i = 0; i < t.num_channels(); ++i) chans[std::size_t(i)] = collective_channel(t.channel_link(i));
  FairShareNetwork net(std::move(chans));
  std::vector<int> ids;
  for (const TpBlock::Flow& f : ring) ids.push_back(net.add_flow(f.route, 1.0, 0.0));
  net.resolve(0.0, [](int) {});
  RingStep step{FairShareNetwork::kInf, 0, {}};
  const TpBlock::Flow* slowest = nullptr;
  for (std::size_t i = 0; i < ring.size(); ++i) {
    step.latency_s = std::max(step.latency_s, ring[i].latency_s);
    if (net.rate(ids[i]) < step.rate_bytes_per_s) {
      step.rate_bytes_per_s = net.rate(ids[i]);
      slowest = &ring[i];
    }
  }
  if (slowest) {
    double narrowest = FairShareNetwork::kInf;
    for (const auto ch : slowest->route) {
      const topo::Link& link = t.channel_link(ch);
      const double bw =
          link.injection_gbps > 0 ? std::min(link.injection_gbps, link.bandwidth_gbps) : link.bandwidth_gbps;
      if (bw < narrowest) {
        narrowest = bw;
        step.link = std::string(to_string(link.kind));
      }
    }
  }
  return step;
}

/// One pass's cost: `bwd` the backward's.
void add_pass(TpBlockCost& c, bool bwd, double collective_s, double qkv_s, double out_s) {
  if (!bwd) {
    c.gather_s += collective_s;
    c.scatter_s += collective_s;
    c.gemm_s += qkv_s + out_s;
    c.all_gathers += 1;
    c.reduce_scatters += 1;
    return;
  }
  // The output gradient's all-gather and the output projection's two GEMMs in turn; the input's
  // re-gather beside the QKV data-gradient GEMM, the input gradient's reduce-scatter beside its weight-gradient
  // GEMM (the same size as the data-gradient one).
  c.gather_s += collective_s + std::max(0.0, collective_s - qkv_s);
  c.scatter_s += std::max(0.0, collective_s - qkv_s);
  c.gemm_s += 2 * out_s + 2 * qkv_s;
  c.hidden_comm_s += 2 * std::min(collective_s, qkv_s);
  c.all_gathers += 2;
  c.reduce_scatters += 1;
}

}  // namespace

double gemm_efficiency(const topo::GpuSpec& g) {
  if (g.gemm_efficiency > 0) return g.gemm_efficiency;
  const auto arch = topo::gpu_arch(g.model);
  return arch && arch->gemm_efficiency > 0 ? arch->gemm_efficiency : topo::kAssumedGemmEfficiency;
}

std::string gemm_source(const topo::GpuSpec& g) {
  if (g.gemm_efficiency > 0) return "the file's gpu.gemm_efficiency";
  const auto arch = topo::gpu_arch(g.model);
  if (arch && arch->gemm_efficiency > 0) return std::string(arch->gemm_source);
  return fmt::format("assumed: {:g} of peak, no published GEMM figure for {} (give gpu.gemm_efficiency)",
                     topo::kAssumedGemmEfficiency, g.model);
}

std::string gemm_line(const topo::GpuSpec& g) {
  return fmt::format("GEMMs at {:.3g} of dense peak: {}", gemm_efficiency(g), gemm_source(g));
}

std::string TpBlockCost::line() const {
  std::string s =
      tp > 1 ? fmt::format("TP {} over {} at {:.1f} GB/s a GPU (all TP groups at once): {} all-gather{} {:.3f} ms, {} "
                           "reduce-scatter{} {:.3f} ms",
                           tp, ring_link.empty() ? "its links" : ring_link, ring_gbps, all_gathers,
                           all_gathers == 1 ? "" : "s", gather_s * 1e3, reduce_scatters,
                           reduce_scatters == 1 ? "" : "s", scatter_s * 1e3)
             : std::string("TP 1: no collectives");
  s += fmt::format(", QKV + output projection GEMMs {:.3f} ms", gemm_s * 1e3);
  if (hidden_comm_s > 0)
    s += fmt::format(" ({:.3f} ms of collectives under the backward's GEMMs)", hidden_comm_s * 1e3);
  return s;
}

Expected<TpBlock> lower_tp_block(const ir::Workload& w, const sched::Layout& l, const topo::Topology& t) {
  if (l.gpus() > t.num_gpus())
    return Error{Field::Tp, fmt::format("the layout takes {} GPUs; the topology has {}", l.gpus(), t.num_gpus())};
  TpBlock b{w, l, {}};
  if (l.tp > 1)
    for (const sched::GpuHop& hop : sched::tp_ring_hops(l)) {
      topo::Route route = t.route(hop.from, hop.to);
      const double latency_s = t.latency_us(route) * 1e-6;
      b.ring.push_back({std::move(route), latency_s});
    }
  return b;
}

TpBlockCost tp_block_cost(const TpBlock& b, const topo::Topology& t) {
  const ir::Workload& w = b.model;
  const sched::Layout& l = b.layout;
  TpBlockCost c;
  c.tp = l.tp;
  const double elem = double(ir::dtype_size(w.dtype));
  const double tokens = double(w.batch) * double(w.seq) / l.cp;  // a CP rank's tokens, gathered
  const double hidden = double(w.heads) * w.head_dim;
  const double qkv_out = double(w.heads + 2 * w.kv_heads) * w.head_dim / l.tp;  // this rank's QKV columns
  const double rate = t.gpu.peak_flops(w.dtype) * gemm_efficiency(t.gpu);
  const double qkv_s = 2 * tokens * hidden * qkv_out / rate;
  const double out_s = 2 * tokens * (hidden / l.tp) * hidden / rate;
  double collective_s = 0;
  if (l.tp > 1) {
    const RingStep step = ring_step(b.ring, t);
    c.shard_bytes = tokens / l.tp * hidden * elem;
    c.ring_gbps = step.rate_bytes_per_s / 1e9;
    c.ring_link = step.link;
    collective_s = (l.tp - 1) * (c.shard_bytes / step.rate_bytes_per_s + step.latency_s + t.stack.message_us * 1e-6);
  }
  if (w.pass != ir::PassKind::Bwd) add_pass(c, false, collective_s, qkv_s, out_s);
  if (w.pass != ir::PassKind::Fwd) add_pass(c, true, collective_s, qkv_s, out_s);
  return c;
}

Expected<TpBlockCost> tp_block_cost(const ir::Workload& w, const sched::Layout& l, const topo::Topology& t) {
  const auto b = lower_tp_block(w, l, t);
  if (!b) return b.error();
  return tp_block_cost(*b, t);
}

}  // namespace charm::sim
