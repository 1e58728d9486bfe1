#pragma once
// GpuArch: what a datasheet and a published kernel say about one GPU model,
// the defaults of a topology's "gpu" block where the file leaves a field out.
//
//   sm_count           streaming multiprocessors (the datasheet)
//   tile_fwd/tile_bwd  the attention kernel's tile (query tokens x key tokens
//                      per thread block) for the forward and backward pass
//   efficiency         attained fraction of dense peak on a full wave of tiles
//
// A block's time is then waves of tiles over the SMs (kernel_shape.hpp); a
// GPU the table does not know keeps the shape-free model (sm_count 0).

#include <optional>
#include <string>
#include <string_view>

namespace charm::topo {

struct KernelTile {
  int q = 0, kv = 0;  // tokens per tile (0: no tile model)
};

struct GpuArch {
  std::string_view match;  // a substring of the model name, upper case ("H100")
  int sm_count = 0;
  KernelTile tile_fwd, tile_bwd;
  double efficiency_fwd = 0, efficiency_bwd = 0;
  std::string_view source;
};

/// The architecture of a model name ("NVIDIA H100 SXM"), or nothing when the table does not know it.
[[nodiscard]] std::optional<GpuArch> gpu_arch(std::string_view model);

}  // namespace charm::topo
