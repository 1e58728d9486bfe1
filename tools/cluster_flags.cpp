#include "tools/cluster_flags.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <memory>

#include "calibrate/kernel_times.hpp"

namespace charm::cli {

void ClusterFlags::add(CLI::App& app) {
  app.add_option("--topology,-t", topology, "topology JSON file (see docs/topology.md, presets in topologies/)");
  app.add_flag("--uniform", uniform, "contention-free fully connected cluster (needs --ranks, --bw-gbps, --tflops)");
  app.add_option("--ranks,-n", ranks,
                 "ranks of the --uniform cluster; with --topology, one context-parallel group on the topology's "
                 "first N GPUs, the others idle (default: every GPU)")
      ->capture_default_str()
      ->each([this](const std::string&) { ranks_given = true; });
  uniform_only = {
      app.add_option("--bw-gbps", bw_gbps, "--uniform: link bandwidth in GB/s"),
      app.add_option("--tflops", tflops, "--uniform: peak TFLOP/s per GPU"),
      app.add_option("--latency-us", latency_us, "--uniform: per-message latency in us")->capture_default_str(),
      app.add_option("--hbm-gbps", hbm_gbps, "--uniform: HBM bandwidth for merges (default: merges are free)")};
  app.add_option("--cp", cp,
                 "with --topology: context-parallel group size of a deployment; every CP group of the layout runs "
                 "at once (default with --tp: the GPUs / TP)");
  app.add_option("--tp", tp, "with --topology: tensor-parallel size (splits the heads; DP is the rest of the GPUs)");
  app.add_option("--gpus", gpus,
                 "with --topology: one context-parallel group on these GPUs, rank r on the r-th listed (e.g. "
                 "0,2,4,6,8,10,12,14); the others idle");
  app.add_option("--order", order,
                 "GPU numbering of the layout: tp-cp (tensor-parallel peers adjacent, Megatron-LM's default) or "
                 "cp-tp (a CP group on consecutive GPUs)")
      ->capture_default_str();
  domains_opt = app.add_option("--domains,-d", domains,
                               "domains: charm's (the outer level of its cross-hardware pipeline) and usp's (its ring "
                               "degree; Ulysses runs over ranks / domains); the other algorithms ignore it (default: "
                               "from the topology's hierarchy; 1 for --uniform)");
  app.add_option("--reserved-gb", reserved_gb,
                 "GB per GPU the rest of the model already holds (weights, optimizer state, other activations), "
                 "added to the attention buffers for the fits verdict")
      ->capture_default_str();
  app.add_option("--kernel", kernel,
                 "attention kernel library over the topology's: fa2, fa3, cudnn (published single-GPU tables), or a "
                 "CSV of your own kernel timings (charm bench-kernels writes one)");
  app.add_option("--assume-gpu", assume_gpu,
                 "a GPU model the tool has no tables for borrows this known part's (H100, A100, ...); reports say so");
  add_max_memory(app, max_memory);
}

topo::GpuOverrides gpu_overrides(const std::string& kernel, const std::string& assume_gpu) {
  topo::GpuOverrides over;
  over.assume_gpu = assume_gpu;
  const auto& names = topo::kernel_library_names();
  if (kernel.empty() || std::find(names.begin(), names.end(), kernel) != names.end()) {
    over.kernel = kernel;
    return over;
  }
  // Not a library: a file of the user's own single-GPU timings. A bare word is a library misspelt.
  if (kernel.find('/') == std::string::npos && kernel.find('.') == std::string::npos)
    fail(Error{"--kernel", fmt::format("unknown kernel library \"{}\" (expected one of: {}, or a CSV file of kernel "
                                       "timings as charm bench-kernels writes)",
                                       kernel, fmt::join(names, ", "))});
  const auto times = unwrap(calib::load_kernel_times(kernel));
  for (const auto& w : times.warnings) std::cerr << "charm: warning: " << w << "\n";
  if (times.rows.empty()) fail(Error{"--kernel", fmt::format("{}: no kernel timings in the file", kernel)});
  auto table = std::make_shared<topo::KernelTable>();
  table->library = "file " + kernel;
  table->source = kernel;
  for (const auto& k : times.rows) {
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

topo::Topology ClusterFlags::get() const {
  if (uniform == !topology.empty()) fail(Error{"--topology", "give exactly one of --topology FILE and --uniform"});
  // 0 stands for "omitted" inside; given, it is a count like any other.
  if (domains < 0 || (domains == 0 && domains_opt != nullptr && domains_opt->count() > 0))
    fail(Error{"--domains", fmt::format("must be >= 1 (or omitted: from the topology), got {}", domains)});
  // A what-if flag that the topology file would silently override is refused:
  // the answer would be the file's, not the one asked for.
  if (!uniform)
    for (const CLI::Option* o : uniform_only)
      if (o->count() > 0)
        fail(Error{o->get_name(), "describes the --uniform cluster only; with --topology the file's numbers apply "
                                  "(edit a copy of the file to ask what if)"});
  if (!(reserved_gb >= 0) || !std::isfinite(reserved_gb) || reserved_gb > 1e4)
    fail(Error{"--reserved-gb", fmt::format("must be a number of GB in [0, 10000], got {}", reserved_gb)});
  if (!uniform) return load_topology_file(topology, gpu_overrides(kernel, assume_gpu));
  if (!kernel.empty() || !assume_gpu.empty())
    fail(Error{kernel.empty() ? "--assume-gpu" : "--kernel", "applies to a --topology; --uniform is an ideal GPU"});
  if (ranks < 1 || ranks > (1 << 16)) fail(Error{"--ranks", fmt::format("must be in [1, 65536], got {}", ranks)});
  // CLI11 reads "nan" and "inf" as doubles; neither is a bandwidth.
  if (!(bw_gbps > 0) || !std::isfinite(bw_gbps))
    fail(Error{"--bw-gbps", fmt::format("--uniform needs a finite --bw-gbps > 0, got {}", bw_gbps)});
  if (!(tflops > 0) || !std::isfinite(tflops))
    fail(Error{"--tflops", fmt::format("--uniform needs a finite --tflops > 0, got {}", tflops)});
  if (!(latency_us >= 0) || !std::isfinite(latency_us))
    fail(Error{"--latency-us", fmt::format("must be a finite number >= 0, got {}", latency_us)});
  if (!(hbm_gbps >= 0) || !std::isfinite(hbm_gbps))
    fail(Error{"--hbm-gbps", fmt::format("must be a finite number >= 0, got {}", hbm_gbps)});
  // The plausible ranges of topology files: past them the simulator's times leave the finite doubles.
  const std::tuple<const char*, topo::Quantity, double> numbers[] = {
      {"--bw-gbps", topo::Quantity::Bandwidth, bw_gbps},
      {"--tflops", topo::Quantity::Tflops, tflops},
      {"--latency-us", topo::Quantity::Latency, latency_us},
      {"--hbm-gbps", topo::Quantity::Bandwidth, hbm_gbps}};
  for (const auto& [flag, q, x] : numbers) {
    if (q == topo::Quantity::Bandwidth && x == 0) continue;  // --hbm-gbps 0: merges are free
    if (const auto why = topo::implausible(q, x, flag); !why.empty()) fail(Error{flag, why});
  }
  return topo::make_uniform(ranks, bw_gbps, tflops, latency_us, hbm_gbps);
}

}  // namespace charm::cli
