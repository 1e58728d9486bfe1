#include "topologies/gpu_arch.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace charm::topo {

namespace {

// FlashAttention-2's tiles (flash_fwd_launch_template.h / flash_bwd_launch_template.h): the forward
// kernel runs 128 query x 64 key tokens per thread block for head dims 128-224, the backward 64 x 64
// at head dim 192 (64 x 128 at 128). Efficiencies are FlashAttention-2's attainment of dense bf16 peak
// at long sequences: 70% / 55% on A100 (the FlashAttention-2 paper, Fig. 4-6: up to 225 TFLOP/s
// forward of 312), 35% / 28% on Hopper, which FlashAttention-2 runs without WGMMA/TMA (about
// 335 TFLOP/s forward of 989, FlashAttention-3 paper, Fig. 5); L20 (Ada) and H20 run the Ampere-style
// code path at lower peaks and keep the project's earlier shared defaults, 50% / 40%.
constexpr KernelTile kFa2Fwd{128, 64}, kFa2Bwd{64, 64};

// Most specific first: "H200" and "H20" share a prefix, as do "H100 PCIE" and "H100".
constexpr std::array kArchs{
    GpuArch{"H200", 132, kFa2Fwd, kFa2Bwd, 0.35, 0.28, "NVIDIA H200 datasheet: 132 SMs (GH100, as H100 SXM)"},
    GpuArch{"H20", 78, kFa2Fwd, kFa2Bwd, 0.50, 0.40, "NVIDIA H20: 78 SMs (GH100 cut down), 148 TFLOP/s bf16"},
    GpuArch{"H100 PCIE", 114, kFa2Fwd, kFa2Bwd, 0.35, 0.28, "NVIDIA H100 PCIe datasheet: 114 SMs"},
    GpuArch{"H100", 132, kFa2Fwd, kFa2Bwd, 0.35, 0.28, "NVIDIA H100 SXM5 datasheet: 132 SMs"},
    GpuArch{"H800", 132, kFa2Fwd, kFa2Bwd, 0.35, 0.28, "NVIDIA H800 SXM: 132 SMs (H100 SXM with less NVLink)"},
    GpuArch{"A100", 108, kFa2Fwd, kFa2Bwd, 0.70, 0.55, "NVIDIA A100 datasheet: 108 SMs"},
    GpuArch{"A800", 108, kFa2Fwd, kFa2Bwd, 0.70, 0.55, "NVIDIA A800: 108 SMs (A100 with less NVLink)"},
    GpuArch{"L20", 92, kFa2Fwd, kFa2Bwd, 0.50, 0.40, "NVIDIA L20: 92 SMs (AD102), 119.5 TFLOP/s bf16"},
    GpuArch{"B200", 148, kFa2Fwd, kFa2Bwd, 0.35, 0.28, "NVIDIA B200: 148 SMs (two dies of 74)"},
};

}  // namespace

std::optional<GpuArch> gpu_arch(std::string_view model) {
  std::string up(model);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  for (const auto& a : kArchs)
    if (up.find(a.match) != std::string::npos) return a;
  return std::nullopt;
}

}  // namespace charm::topo
