#pragma once
// `charm bench-kernels`: the project's own attention block kernels timed on one device, one
// row per (pass, shape, mask) in the kernel-times CSV that `charm calibrate --kernels` fits.

#include <cstdint>
#include <vector>

#include "calibrate/kernel_times.hpp"
#include "support/expected.hpp"

namespace charm::cli {

/// What to time: every pass x tokens x mask of one head layout.
struct KernelBenchSpec {
  std::vector<ir::PassKind> passes;  // Fwd and/or Bwd
  std::vector<std::int64_t> tokens;  // q = kv tokens of a block
  std::vector<bool> causal;          // full and/or causal (the diagonal block)
  std::int64_t batch = 1, heads = 8, kv_heads = 8, head_dim = 128;
  ir::DType dtype = ir::DType::BF16;  // on a GPU; the CPU kernels compute in fp32
  bool on_gpu = false;
  int repeats = 5;  // timed calls per row; the row holds their median
  int warmup = 1;
  int device = 0;  // cuda
};

/// One median time (ms) per row, in the order passes x tokens x causal; `progress` after each.
using KernelTimer = Expected<double> (*)(const KernelBenchSpec& spec, const calib::KernelTime& row);

/// The CPU block kernels (runtime/cpu_attention), fp32 whatever the dtype.
[[nodiscard]] Expected<double> time_cpu_kernel(const KernelBenchSpec& spec, const calib::KernelTime& row);
#ifdef CHARM_CLI_HAVE_CUDA
/// The CUDA block kernels (runtime/cuda BlockAttention), CUDA events.
[[nodiscard]] Expected<double> time_cuda_kernel(const KernelBenchSpec& spec, const calib::KernelTime& row);
#endif

}  // namespace charm::cli
