#pragma once
// StackSpec: what the software around the kernels costs on given hardware.
//
// The hardware layer (links, datasheet rates) says what the wires carry; the
// stack says what a framework and its collective library attain on them:
//
//   host_us            host time the framework's one thread per GPU spends issuing one op
//                      (a kernel call with its bookkeeping, a send or a receive): the thread issues a
//                      rank's ops in program order and never waits for the GPU, so an op cannot start
//                      before the thread has issued it and every op before it
//   step_us            per schedule step (one attention block issued by the framework:
//                      the Python/C++ dispatch of the kernel, its merge and its bookkeeping)
//   update_passes      fused passes over a block's fp32 results that the framework adds to
//                      fold them into the running ones (a pass: read both, write one, 12 bytes
//                      an element); 0 where the kernel accumulates in place
//   bwd_update_passes  the same for the backward pass's dQ, dK and dV (each a plain `+=`: one pass)
//   merge_traffic      HBM bytes a merge/accumulate op of the plan moves, in units of one fused
//                      pass (read partial and accumulator, write the accumulator)
//   message_us         per point-to-point message (issuing the send/recv pair, waiting on it)
//   compute_slowdown   while a GPU has transfers in flight its attention kernels take
//                      (1 + x) as long: the library's channels run as thread blocks on the
//                      SMs and its traffic takes HBM bandwidth
//   comm_slowdown      while a GPU computes, its transfers take (1 + y) as long
//   intra_flow_gbps    the most one transfer attains on a GPU link of a generated node
//   intra_injection_gbps  what a GPU's concurrent transfers attain together there
//                      (0: no limit below the link; a file's own intra fields win)
//
// Named presets (stack_preset) let a datasheet description inherit a realistic
// stack, each value with its public source beside it in stack.cpp: te-fused (the
// default: TransformerEngine's context parallelism), pytorch-eager (ring-flash-
// attention), fused (a C++ runtime such as this project's), paper-testbed (the fit to
// the paper's cluster, for the paper's calibrated presets only) and none (the ideal
// one, under which the paper's closed forms hold). A stack also names the attention
// kernel library it runs (the default of a GPU's kernel tables).

#include <string>
#include <string_view>
#include <vector>

#include "scheduler/support/expected.hpp"

namespace charm::topo {

struct StackSpec {
  std::string preset = "none";
  double host_us = 0;
  double step_us = 0;
  double update_passes = 0;
  double bwd_update_passes = 0;
  double merge_traffic = 1;
  double message_us = 0;
  double compute_slowdown = 0;
  double comm_slowdown = 0;
  double intra_flow_gbps = 0;
  double intra_injection_gbps = 0;
  std::string kernel = "fa2";    // the kernel library the framework runs by default
  std::string kernel_hopper;     // ... on Hopper, where it differs
  std::string source = "ideal";  // where the preset's values come from (one phrase)

  /// Whether compute and communication slow each other (the simulator then tracks both per GPU).
  [[nodiscard]] bool overlap_costs() const { return compute_slowdown > 0 || comm_slowdown > 0; }
};

/// The preset of that name; errors list the names.
[[nodiscard]] Expected<StackSpec> stack_preset(std::string_view name);
[[nodiscard]] const std::vector<std::string>& stack_preset_names();
/// The preset a topology file gets when it names none.
inline constexpr std::string_view kDefaultStack = "te-fused";
/// The kernel library `s` runs on GPUs of `family` (gpu_arch.hpp) unless the topology names one.
[[nodiscard]] std::string_view default_kernel_library(const StackSpec& s, std::string_view family);

}  // namespace charm::topo
