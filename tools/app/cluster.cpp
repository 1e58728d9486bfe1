#include "tools/app/cluster.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "calibrate/kernel_times.hpp"
#include "sim/evaluate.hpp"
#include "support/number_text.hpp"

namespace charm::app {

Expected<topo::GpuOverrides> gpu_overrides(const std::string& kernel, const std::string& assume_gpu,
                                           const WarningSink& warn) {
  topo::GpuOverrides over;
  over.assume_gpu = assume_gpu;
  const auto& names = topo::kernel_library_names();
  if (kernel.empty() || std::find(names.begin(), names.end(), kernel) != names.end()) {
    over.kernel = kernel;
    return over;
  }
  // Not a library: a file of the user's own single-GPU timings. A bare word is a library misspelt.
  if (kernel.find('/') == std::string::npos && kernel.find('.') == std::string::npos)
    return Error{"--kernel", fmt::format("unknown kernel library \"{}\" (expected one of: {}, or a CSV file of kernel "
                                         "timings as charm bench-kernels writes)",
                                         kernel, fmt::join(names, ", "))};
  const auto times = calib::load_kernel_times(kernel);
  if (!times) return times.error();
  for (const auto& w : times->warnings) warn(w);
  if (times->rows.empty()) return Error{"--kernel", fmt::format("{}: no kernel timings in the file", kernel)};
  auto table = std::make_shared<topo::KernelTable>();
  table->library = "file " + kernel;
  table->source = kernel;
  for (const auto& k : times->rows) {
    topo::KernelRow r;
    r.fwd = k.workload.pass == ir::PassKind::Fwd;
    r.causal = k.causal;
    r.head_dim = static_cast<int>(k.workload.head_dim);
    r.q_tokens = double(k.q_tokens);
    r.kv_tokens = double(k.kv_tokens);
    r.batch_heads = double(k.workload.batch) * double(k.workload.heads);
    r.seconds = k.time_ms * 1e-3;
    r.source = fmt::format("{}:{}", kernel, k.line);
    table->rows.push_back(std::move(r));
  }
  over.kernel_table = std::move(table);
  return over;
}

Status Cluster::check_domains() const {
  // 0 stands for "omitted" inside; given, it is a count like any other.
  if (domains < 0 || (domains == 0 && domains_given))
    return Error{"--domains", fmt::format("must be >= 1 (or omitted: from the topology), got {}", domains)};
  return {};
}

namespace {
/// The uniform model's numbers, checked: finite, and in the ranges topology files hold.
Status check_uniform_numbers(const Cluster& c) {
  if (c.ranks < 1 || c.ranks > (1 << 16))
    return Error{"--ranks", fmt::format("must be in [1, 65536], got {}", c.ranks)};
  // CLI11 reads "nan" and "inf" as doubles; neither is a bandwidth.
  if (!(c.bw_gbps > 0) || !std::isfinite(c.bw_gbps))
    return Error{"--bw-gbps", fmt::format("--uniform needs a finite --bw-gbps > 0, got {}", c.bw_gbps)};
  if (!(c.tflops > 0) || !std::isfinite(c.tflops))
    return Error{"--tflops", fmt::format("--uniform needs a finite --tflops > 0, got {}", c.tflops)};
  if (!(c.latency_us >= 0) || !std::isfinite(c.latency_us))
    return Error{"--latency-us", fmt::format("must be a finite number >= 0, got {}", c.latency_us)};
  if (!(c.hbm_gbps >= 0) || !std::isfinite(c.hbm_gbps))
    return Error{"--hbm-gbps", fmt::format("must be a finite number >= 0, got {}", c.hbm_gbps)};
  // The plausible ranges of topology files: past them the simulator's times leave the finite doubles.
  const std::tuple<const char*, topo::Quantity, double> numbers[] = {
      {"--bw-gbps", topo::Quantity::Bandwidth, c.bw_gbps},
      {"--tflops", topo::Quantity::Tflops, c.tflops},
      {"--latency-us", topo::Quantity::Latency, c.latency_us},
      {"--hbm-gbps", topo::Quantity::Bandwidth, c.hbm_gbps}};
  for (const auto& [flag, q, x] : numbers) {
    if (q == topo::Quantity::Bandwidth && x == 0) continue;  // --hbm-gbps 0: merges are free
    if (const auto why = topo::implausible(q, x, flag); !why.empty()) return Error{flag, why};
  }
  return {};
}
}  // namespace

Expected<topo::Topology> Cluster::load(const WarningSink& warn) const {
  const bool from_document = topology_doc.has_value();
  if (uniform == (!topology.empty() || from_document))
    return Error{"--topology", "give exactly one of --topology FILE and --uniform"};
  if (auto s = check_domains(); !s) return s.error();
  // A what-if number that the topology would silently override is refused: the answer would be the
  // topology's, not the one asked for.
  const std::pair<const char*, bool> uniform_only[] = {
      {"--bw-gbps", bw_given}, {"--tflops", tflops_given}, {"--latency-us", latency_given}, {"--hbm-gbps", hbm_given}};
  if (!uniform)
    for (const auto& [flag, given] : uniform_only)
      if (given)
        return Error{flag, "describes the --uniform cluster only; with --topology the file's numbers apply (edit a "
                           "copy of the file to ask what if)"};
  if (!(reserved_gb >= 0) || !std::isfinite(reserved_gb) || reserved_gb > 1e4)
    return Error{"--reserved-gb", fmt::format("must be a number of GB in [0, 10000], got {}", reserved_gb)};
  if (from_document) return topo::parse_topology(*topology_doc, "topology");
  if (!uniform) {
    auto over = gpu_overrides(kernel, assume_gpu, warn);
    if (!over) return over.error();
    auto t = topo::load_topology(topology, *over);
    if (t)
      for (const auto& w : t->warnings) warn(w);
    return t;
  }
  if (!kernel.empty() || !assume_gpu.empty())
    return Error{kernel.empty() ? "--assume-gpu" : "--kernel", "applies to a --topology; --uniform is an ideal GPU"};
  if (auto s = check_uniform_numbers(*this); !s) return s.error();
  return topo::make_uniform(ranks, bw_gbps, tflops, latency_us, hbm_gbps);
}

Expected<sched::MemoryBudget> Cluster::budget() const { return sched::memory_budget(max_memory); }

Expected<std::optional<sched::Layout>> Cluster::layout_for(const topo::Topology& t) const {
  if (cp == 0 && tp == 0) {
    if (order != kDefaultOrder) return Error{"--order", "orders the axes of a --cp / --tp layout; give one of them"};
    return std::optional<sched::Layout>();
  }
  if (uniform) return Error{cp != 0 ? "--cp" : "--tp", "places groups on a --topology; --uniform has no layout"};
  if (ranks_given) return Error{"--ranks", "gives one group on the first N GPUs; with --cp / --tp drop --ranks"};
  const auto o = sched::parse_layout_order(order);
  if (!o) return o.error();
  const int tp_size = tp == 0 ? 1 : tp;
  auto l =
      cp == 0 ? sched::make_tp_layout(t.num_gpus(), tp_size, *o) : sched::make_layout(t.num_gpus(), cp, tp_size, *o);
  if (!l) return l.error();
  return std::optional<sched::Layout>(std::move(l).value());
}

Expected<std::vector<std::int32_t>> Cluster::gpu_map(const topo::Topology& t) const {
  if (gpus.empty()) return std::vector<std::int32_t>();
  if (uniform) return Error{"--gpus", "places a group on a --topology; --uniform has no GPUs to choose"};
  if (ranks_given || cp != 0 || tp != 0)
    return Error{"--gpus", "places one group by hand; drop --ranks, --cp and --tp"};
  return parse_gpu_list(gpus, "--gpus", t.num_gpus(), fmt::format("{} has {} GPUs", t.name, t.num_gpus()));
}

Expected<int> Cluster::ranks_for(const topo::Topology& t) const {
  if (uniform) return ranks;
  if (!gpus.empty()) {
    const auto map = gpu_map(t);
    if (!map) return map.error();
    return int(map->size());
  }
  const auto l = layout_for(t);
  if (!l) return l.error();
  if (*l) return (*l)->cp;
  if (!ranks_given) return t.num_gpus();
  if (ranks < 1 || ranks > t.num_gpus())
    return Error{"--ranks",
                 fmt::format("must be in [1, {}]: {} has {} GPUs, got {}", t.num_gpus(), t.name, t.num_gpus(), ranks)};
  return ranks;
}

Expected<int> Cluster::domains_for(const topo::Topology& t) const {
  if (domains > 0) return domains;
  if (uniform) return 1;
  const auto l = layout_for(t);
  if (!l) return l.error();
  if (*l) return sim::default_domains(t, sched::layout_gpus(**l), (*l)->cp);
  if (!gpus.empty()) {
    const auto map = gpu_map(t);
    if (!map) return map.error();
    return sim::default_domains(t, *map, int(map->size()));
  }
  const auto r = ranks_for(t);
  if (!r) return r.error();
  return sim::default_domains(t, *r);
}

}  // namespace charm::app
