#include "topologies/gpu_arch.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace charm::topo {

namespace {

// FlashAttention-2's tiles (flash_fwd_launch_template.h / flash_bwd_launch_template.h): the forward
// kernel runs 128 query x 64 key tokens per thread block for head dims 128-224, the backward 64 x 64
// at head dim 192 (64 x 128 at 128). What a kernel attains per tile is no longer a number of this
// table: it comes from the kernel library's published benchmarks (topologies/kernels/published.csv)
// through the tile model, so a part is only as well known as its family's tables.
constexpr KernelTile kFa2Fwd{128, 64}, kFa2Bwd{64, 64};

constexpr std::string_view kSameDie = "tables measured on H100 SXM: the same GH100 die, SMs and clocks";
constexpr std::string_view kFractionOfPeak =
    "assumed: the family's tables (measured on its flagship) held as a fraction of this part's peak";

// GEMM figures: dense bf16 matmul at its best shape, as a fraction of the datasheet's dense peak.
// MAMF: the "maximum achievable matmul FLOPS" table of stas00/ml-engineering (compute/accelerator,
// torch.matmul over a shape search); at an attention block's projection shape (2048 x 8192 x 8192) an
// H100 attains a little less, 742.7 TFLOP/s (pytorch/pytorch issue 100850). Crowd-sourced torch.mm
// figures: zzc0721/torch-performance-test-data (best square size).
constexpr std::string_view kMamfH100 = "MAMF table (stas00/ml-engineering): H100 SXM bf16 794.5 of 989 TFLOP/s";
constexpr std::string_view kMamfA100 = "MAMF table (stas00/ml-engineering): A100 SXM bf16 271.2 of 312 TFLOP/s";

// Most specific first: "H200" and "H20" share a prefix, as do "H100 PCIE" and "H100".
constexpr std::array kArchs{
    GpuArch{"H200", 132, kFa2Fwd, kFa2Bwd, "hopper", "NVIDIA H200 datasheet: 132 SMs (GH100, as H100 SXM)", kSameDie,
            0.803, "MAMF table (stas00/ml-engineering): H100 SXM bf16 794.5 of 989 TFLOP/s, 'H200 is the same'"},
    GpuArch{"H20", 78, kFa2Fwd, kFa2Bwd, "hopper", "NVIDIA H20: 78 SMs (GH100 cut down), 148 TFLOP/s bf16",
            kFractionOfPeak, 0.961,
            "torch.mm bf16 142.25 of 148 TFLOP/s at 10240^3 (zzc0721/torch-performance-test-data issue 77)"},
    GpuArch{"H100 PCIE", 114, kFa2Fwd, kFa2Bwd, "hopper", "NVIDIA H100 PCIe datasheet: 114 SMs", kFractionOfPeak, 0.803,
            "assumed: H100 SXM's MAMF fraction (794.5 of 989 TFLOP/s) held on the PCIe part"},
    GpuArch{"H100", 132, kFa2Fwd, kFa2Bwd, "hopper", "NVIDIA H100 SXM5 datasheet: 132 SMs", kSameDie, 0.803, kMamfH100},
    GpuArch{"H800", 132, kFa2Fwd, kFa2Bwd, "hopper", "NVIDIA H800 SXM: 132 SMs (H100 SXM with less NVLink)", kSameDie,
            0.803, kMamfH100},
    GpuArch{"A100", 108, kFa2Fwd, kFa2Bwd, "ampere", "NVIDIA A100 datasheet: 108 SMs",
            "tables measured on A100 SXM4 80GB", 0.869, kMamfA100},
    GpuArch{"A800", 108, kFa2Fwd, kFa2Bwd, "ampere", "NVIDIA A800: 108 SMs (A100 with less NVLink)",
            "tables measured on A100 SXM4: the same GA100 die, SMs and clocks", 0.869, kMamfA100},
    GpuArch{"L40S", 142, kFa2Fwd, kFa2Bwd, "ada", "NVIDIA L40S datasheet: 142 SMs (AD102), 362 TFLOP/s bf16 dense", "",
            0.743, "torch.mm bf16 269.15 of 362.05 TFLOP/s (zzc0721/torch-performance-test-data issue 43)"},
    GpuArch{"L20", 92, kFa2Fwd, kFa2Bwd, "ada", "NVIDIA L20: 92 SMs (AD102), 119.5 TFLOP/s bf16", "", 0.955,
            "torch.mm bf16 114.14 of 119.5 TFLOP/s at 8192^3 (zzc0721/torch-performance-test-data issue 107)"},
    GpuArch{"B200", 148, kFa2Fwd, kFa2Bwd, "blackwell", "NVIDIA B200: 148 SMs (two dies of 74)", "", 0.776,
            "MAMF table (stas00/ml-engineering): B200 SXM bf16 1745 of 2250 TFLOP/s"},
};

}  // namespace

std::vector<std::string> gpu_arch_names() {
  std::vector<std::string> names;
  for (const auto& a : kArchs) names.emplace_back(a.match);
  return names;
}

std::optional<GpuArch> gpu_arch(std::string_view model) {
  std::string up(model);
  std::transform(up.begin(), up.end(), up.begin(), [](unsigned char c) { return char(std::toupper(c)); });
  for (const auto& a : kArchs)
    if (up.find(a.match) != std::string::npos) return a;
  return std::nullopt;
}

}  // namespace charm::topo
