#pragma once
// GpuArch: what a datasheet and a published kernel say about one GPU model,
// the defaults of a topology's "gpu" block where the file leaves a field out.
//
//   sm_count           streaming multiprocessors (the datasheet)
//   tile_fwd/tile_bwd  the attention kernel's tile (query tokens x key tokens
//                      per thread block) for the forward and backward pass
//   family             the architecture (ampere, hopper, ada, blackwell) whose published
//                      kernel tables (kernel_table.hpp) apply to it
//   kernel_note        how those tables carry over to this part (measured on the same die,
//                      or taken as a fraction of peak from a sibling: an assumption)
//   gemm_efficiency    the fraction of dense peak a large bf16 GEMM attains (the projections of an
//                      attention block), with gemm_source: where that figure was published
//
// A block's time is then waves of tiles over the SMs at the attainment the kernel
// library's table gives (sim/compute_model.hpp); a GPU this table does not know has
// no default: its file gives its attainment, or the commands refuse it.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace charm::topo {

struct KernelTile {
  int q = 0, kv = 0;  // tokens per tile (0: no tile model)
};

struct GpuArch {
  std::string_view match;  // a substring of the model name, upper case ("H100")
  int sm_count = 0;
  KernelTile tile_fwd, tile_bwd;
  std::string_view family;
  std::string_view source;
  std::string_view kernel_note;
  double gemm_efficiency = 0;  // 0: no published figure (kAssumedGemmEfficiency, said so)
  std::string_view gemm_source;
};

/// A GEMM's attained fraction of peak where neither the file nor the table gives one: an assumption, named
/// wherever it is used.
inline constexpr double kAssumedGemmEfficiency = 0.7;

/// The architecture of a model name ("NVIDIA H100 SXM"), or nothing when the table does not know it.
[[nodiscard]] std::optional<GpuArch> gpu_arch(std::string_view model);
/// The names --assume-gpu takes (the table's match strings).
[[nodiscard]] std::vector<std::string> gpu_arch_names();

}  // namespace charm::topo
