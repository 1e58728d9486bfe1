#include "tools/cluster_flags.hpp"

#include <CLI/CLI.hpp>

#include <string>

namespace charm::cli {

void ClusterFlags::add(CLI::App& app) {
  app.add_option("--topology,-t", topology, "topology JSON file (see docs/topology.md, presets in topologies/)");
  app.add_flag("--uniform", uniform, "contention-free fully connected cluster (needs --ranks, --bw-gbps, --tflops)");
  app.add_option("--ranks,-n", ranks,
                 "ranks of the --uniform cluster; with --topology, one context-parallel group on the topology's "
                 "first N GPUs, the others idle (default: every GPU)")
      ->capture_default_str()
      ->each([this](const std::string&) { ranks_given = true; });
  app.add_option("--bw-gbps", bw_gbps, "--uniform: link bandwidth in GB/s")->each([this](const std::string&) {
    bw_given = true;
  });
  app.add_option("--tflops", tflops, "--uniform: peak TFLOP/s per GPU")->each([this](const std::string&) {
    tflops_given = true;
  });
  app.add_option("--latency-us", latency_us, "--uniform: per-message latency in us")
      ->capture_default_str()
      ->each([this](const std::string&) { latency_given = true; });
  app.add_option("--hbm-gbps", hbm_gbps, "--uniform: HBM bandwidth for merges (default: merges are free)")
      ->each([this](const std::string&) { hbm_given = true; });
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
  app.add_option("--domains,-d", domains,
                 "domains: charm's (the outer level of its cross-hardware pipeline) and usp's (its ring degree; "
                 "Ulysses runs over ranks / domains); the other algorithms ignore it (default: from the topology's "
                 "hierarchy; 1 for --uniform)")
      ->each([this](const std::string&) { domains_given = true; });
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

topo::Topology ClusterFlags::get() const { return unwrap(load(print_warning)); }

}  // namespace charm::cli
