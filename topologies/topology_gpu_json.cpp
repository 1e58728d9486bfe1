// "gpu" and "stack" of a topology document: the GPU's datasheet figures, its kernel, and the software around it.

#include "topologies/topology_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "topologies/gpu_arch.hpp"
#include "topologies/kernel_table.hpp"

namespace charm::topo::reader {

namespace {

/// "sm_count" and "kernel": a library name, or {"library", "fwd": {"tile_q", "tile_kv"}, "bwd": {...}} over the
/// architecture's defaults; the library named (empty: the stack's default) goes to `library`.
Status parse_kernel_shape(const Node& n, GpuSpec& g, std::string& library) {
  CHARM_TRY_LET(sms, get_int(n, "sm_count", false, g.sm_count, 0, 100000));
  g.sm_count = static_cast<int>(sms);
  if (!n.has("kernel")) return {};
  const Node k = n.at("kernel");
  if (k.j.is_string()) {
    CHARM_TRY_LET(name, text_of(k));
    library = name;
    return {};
  }
  if (!k.j.is_object())
    return k.error("must be a library name (fa2, fa3, cudnn) or an object {\"library\", \"fwd\": {\"tile_q\", "
                   "\"tile_kv\"}, \"bwd\": {...}}");
  if (auto s = check_fields(k, {"library", "fwd", "bwd"}); !s) return s;
  CHARM_TRY_LET(name, get_string(k, "library", false, ""));
  library = name;
  for (const char* pass : {"fwd", "bwd"}) {
    if (!k.has(pass)) continue;
    const Node p = k.at(pass);
    if (!p.j.is_object()) return p.error("must be an object {\"tile_q\", \"tile_kv\"}");
    if (auto s = check_fields(p, {"tile_q", "tile_kv"}); !s) return s;
    KernelTile& t = std::string_view(pass) == "fwd" ? g.tile_fwd : g.tile_bwd;
    CHARM_TRY_LET(q, get_int(p, "tile_q", t.q == 0, t.q, 1, 4096));
    CHARM_TRY_LET(kv, get_int(p, "tile_kv", t.kv == 0, t.kv, 1, 4096));
    t = {static_cast<int>(q), static_cast<int>(kv)};
  }
  return {};
}

/// A per-pass pair at `key`: one number for both passes, or {"fwd", "bwd"}. With `fwd_required` the object's
/// "fwd" must be there and "bwd" defaults to it; otherwise both default to `dflt`.
Status parse_pass_pair(const Node& n, const char* key, bool fwd_required, double dflt, double& fwd, double& bwd) {
  const Node e = n.at(key);
  if (e.j.is_number()) {
    CHARM_TRY_LET(x, get_number(n, key, true, dflt, true, false));
    fwd = bwd = x;
  } else if (e.j.is_object()) {
    if (auto s = check_fields(e, {"fwd", "bwd"}); !s) return s;
    CHARM_TRY_LET(f, get_number(e, "fwd", fwd_required, dflt, true, false));
    CHARM_TRY_LET(b, get_number(e, "bwd", false, fwd_required ? f : dflt, true, false));
    fwd = f;
    bwd = b;
  } else {
    return e.error("must be a number or an object {\"fwd\", \"bwd\"}");
  }
  return {};
}

/// "kernel_scale": a number or {"fwd", "bwd"}: multipliers of the table's attainment (what a fit moves).
Status parse_kernel_scale(const Node& n, GpuSpec& g) {
  if (!n.has("kernel_scale")) return {};
  if (auto s = parse_pass_pair(n, "kernel_scale", false, 1, g.kernel_scale_fwd, g.kernel_scale_bwd); !s) return s;
  for (const double x : {g.kernel_scale_fwd, g.kernel_scale_bwd})
    if (!(x >= 0.05 && x <= 20))
      return n.at("kernel_scale").error(fmt::format("must be in [0.05, 20] (a multiplier), got {}", x));
  return {};
}

/// What the GPU's kernels attain: the file's flat efficiency, or the kernel library's published table for the
/// GPU's family (the file's library, else the stack's), or for an unknown GPU one line naming what to give.
Status resolve_kernel(const Node& n, const std::string& library, GpuSpec& g, const StackSpec& st, ModelSources& src,
                      bool flat_allowed) {
  if (flat_allowed && n.has("efficiency")) {
    if (!library.empty())
      return n.at("kernel").error("gives a kernel library, and \"efficiency\" gives one attained fraction of peak: "
                                  "give one of them");
    src.kernel =
        fmt::format("efficiency {:.3g} fwd / {:.3g} bwd of peak (the file's)", g.efficiency_fwd, g.efficiency_bwd);
    return {};
  }
  if (g.family.empty() && (!n.has("model") || g.model == "gpu")) {
    src.kernel = "ideal: no GPU model named, every kernel at 100% of peak";
    src.assumed.push_back("kernels at 100% of peak");
    return {};
  }
  if (g.family.empty())
    return n.error(fmt::format(
        "\"model\": \"{}\" has no published kernel table: give gpu.efficiency (attained fraction of dense peak, "
        "{{\"fwd\", \"bwd\"}}) and gpu.sm_count, or a CSV of your own kernel timings (--kernel FILE; charm "
        "bench-kernels writes one), or --assume-gpu ARCH (gpu.assume in the file) to borrow a known part's ({})",
        g.model, fmt::join(gpu_arch_names(), ", ")));
  const std::string lib = library.empty() ? std::string(default_kernel_library(st, g.family)) : library;
  auto table = kernel_table(lib, g.family);
  if (!table && library.empty())  // a known part whose family has no published benchmark (Ada: L20, L40S)
    return n.error(fmt::format(
        "\"model\": \"{}\" has no published kernel table ({} on {} GPUs has none): give gpu.efficiency (attained "
        "fraction of dense peak, {{\"fwd\", \"bwd\"}}), or a CSV of your own kernel timings (--kernel FILE; charm "
        "bench-kernels writes one), or --assume-gpu ARCH (gpu.assume in the file) to borrow a known part's ({})",
        g.model, lib, g.family, fmt::join(gpu_arch_names(), ", ")));
  if (!table) {
    const Node at = n.has("kernel") ? n.at("kernel") : n;
    return at.error(table.error().what + "; give gpu.kernel (a library with a table) or gpu.efficiency");
  }
  g.kernel = *table;
  src.kernel = fmt::format("{} on {} ({}published single-GPU benchmarks, topologies/kernels/published.csv)", lib,
                           g.family, library.empty() ? "the stack's kernel; " : "");
  if (g.kernel_scale_fwd != 1 || g.kernel_scale_bwd != 1)
    src.kernel +=
        fmt::format(" x {:.3g} fwd / {:.3g} bwd (the file's kernel_scale)", g.kernel_scale_fwd, g.kernel_scale_bwd);
  return {};
}

Status parse_stack_fields(const Node& n, StackSpec& st);

}  // namespace

/// "stack": a preset name, or an object of a preset (default: the default stack) and fields over it; where
/// its values come from goes to `src`.
Status parse_stack(const Node& root, StackSpec& st, ModelSources& src) {
  auto s = parse_stack_fields(root, st);
  if (!s) return s;
  src.stack = fmt::format("{} ({}{})", st.preset, root.has("stack") ? "" : "the default; ", st.source);
  if (root.has("stack") && root.at("stack").j.is_object() && root.at("stack").j.size() > 1)
    src.stack += "; with the file's own fields over it";
  if (st.comm_slowdown == 0 && st.preset != "none") src.assumed.push_back("transfers not slowed by compute");
  return {};
}

namespace {

/// One field of a "stack" object, the preset's value where the object has none; checked as its quantity says.
Ex<double> read_stack_field(const Node& n, const StackField& f, double preset) {
  const char* key = f.name.data();
  switch (f.quantity) {
  case StackQuantity::Cost:
    return get_quantity(n, key, false, preset, Quantity::Latency);
  case StackQuantity::Bandwidth:
    return get_quantity(n, key, false, preset, Quantity::Bandwidth, /*zero_is_none=*/true);
  case StackQuantity::Passes: {
    CHARM_TRY_LET(x, get_number(n, key, false, preset, false, true));
    if (x > 100) return n.at(key).error(fmt::format("must be in [0, 100] passes, got {}", x));
    return x;
  }
  case StackQuantity::FusedPasses: {
    CHARM_TRY_LET(x, get_number(n, key, false, preset, true, false));
    if (x < 0.1 || x > 100) return n.at(key).error(fmt::format("must be in [0.1, 100] fused passes, got {}", x));
    return x;
  }
  case StackQuantity::Slowdown: {
    CHARM_TRY_LET(x, get_number(n, key, false, preset, false, true));
    if (x > 10) return n.at(key).error(fmt::format("must be in [0, 10] (1 = twice as long), got {}", x));
    return x;
  }
  }
  return preset;
}

/// The preset a "stack" names, with the fields the object gives over it.
Status parse_stack_fields(const Node& root, StackSpec& st) {
  if (!root.has("stack")) {
    st = stack_preset(kDefaultStack).value();
    return {};
  }
  const Node n = root.at("stack");
  if (n.j.is_string()) {
    CHARM_TRY_LET(name, text_of(n));
    auto p = stack_preset(name);
    if (!p) return n.error(p.error().what);
    st = *p;
    return {};
  }
  if (!n.j.is_object()) return n.error("must be a preset name or an object {\"preset\", \"step_us\", ...}");
  std::vector<const char*> known{"preset"};
  for (const StackField& f : kStackFields) known.push_back(f.name.data());
  if (auto s = check_fields(n, known); !s) return s;
  CHARM_TRY_LET(name, get_string(n, "preset", false, std::string(kDefaultStack)));
  auto p = stack_preset(name);
  if (!p) return n.at("preset").error(p.error().what);
  StackSpec out = *p;
  for (const StackField& f : kStackFields) {
    CHARM_TRY_LET(x, read_stack_field(n, f, out.*f.member));
    out.*f.member = x;
  }
  st = std::move(out);
  return {};
}

/// "model": the architecture table's SMs, tiles and family; "assume": a known part to borrow them from.
Status parse_gpu_model(const Node& n, const std::string& assume_flag, GpuSpec& g, ModelSources& src) {
  CHARM_TRY_LET(model, get_string(n, "model", false, "gpu"));
  g.model = model;
  CHARM_TRY_LET(file_assume, get_string(n, "assume", false, ""));
  const std::string assume = assume_flag.empty() ? file_assume : assume_flag;
  auto arch = gpu_arch(model);
  if (!assume.empty()) {
    const Node at = n.has("assume") ? n.at("assume") : n;
    // A known part borrows only where its own family has no published table (Ada, Blackwell).
    if (arch && kernel_table("fa2", arch->family))
      return at.error(fmt::format("\"{}\" is a known part with published kernel tables: nothing to assume", model));
    arch = gpu_arch(assume);
    if (!arch) {
      const std::string why =
          fmt::format("unknown part \"{}\" (expected one of: {})", assume, fmt::join(gpu_arch_names(), ", "));
      return assume_flag.empty() ? at.error("assume: " + why) : Error{Field::AssumeGpu, why};
    }
    src.assumed.push_back(fmt::format("{} borrows {}'s SMs, tiles and kernel tables", model, arch->match));
  }
  // A GPU the architecture table knows gets its datasheet SMs, its kernel's tiles and its family's tables.
  if (arch) {
    g.sm_count = arch->sm_count;
    g.tile_fwd = arch->tile_fwd;
    g.tile_bwd = arch->tile_bwd;
    g.family = arch->family;
    if (!arch->kernel_note.empty() && arch->kernel_note.rfind("assumed", 0) == 0)
      src.assumed.push_back(fmt::format("{}: {}", arch->match, arch->kernel_note));
  }
  return {};
}

}  // namespace

Status parse_gpu(const Node& n, const GpuOverrides& over, Topology& t) {
  GpuSpec& g = t.gpu;
  ModelSources& src = t.sources;
  if (!n.j.is_object()) return n.error("must be an object");
  if (auto s = check_fields(n, {"model", "assume", "tflops", "hbm_gbps", "efficiency", "kernel_scale", "half_tokens",
                                "launch_us", "memory_gb", "sm_count", "kernel", "gemm_efficiency"});
      !s)
    return s;
  if (auto s = parse_gpu_model(n, over.assume_gpu, g, src); !s) return s;
  std::string library;
  if (auto s = parse_kernel_shape(n, g, library); !s) return s;
  if (!over.kernel.empty()) library = over.kernel;
  if (auto s = parse_kernel_scale(n, g); !s) return s;
  if (!n.has("tflops")) return n.missing("tflops");
  const Node tf = n.at("tflops");
  if (tf.j.is_number()) {
    CHARM_TRY_LET(x, get_quantity(n, "tflops", true, 0, Quantity::Tflops));
    g.tflops_bf16 = g.tflops_fp16 = x;
    g.tflops_fp32 = x / 2;
  } else if (tf.j.is_object()) {
    if (auto s = check_fields(tf, {"bf16", "fp16", "fp32"}); !s) return s;
    CHARM_TRY_LET(bf16, get_quantity(tf, "bf16", true, 0, Quantity::Tflops));
    CHARM_TRY_LET(fp16, get_quantity(tf, "fp16", false, bf16, Quantity::Tflops));
    CHARM_TRY_LET(fp32, get_quantity(tf, "fp32", false, bf16 / 2, Quantity::Tflops));
    g.tflops_bf16 = bf16;
    g.tflops_fp16 = fp16;
    g.tflops_fp32 = fp32;
  } else {
    return tf.error("must be a number or an object {\"bf16\", \"fp16\", \"fp32\"}");
  }
  CHARM_TRY_LET(hbm, get_quantity(n, "hbm_gbps", false, 0, Quantity::Bandwidth, /*zero_is_none=*/true));
  g.hbm_gbps = hbm;
  if (n.has("efficiency")) {
    const Node e = n.at("efficiency");
    if (auto s = parse_pass_pair(n, "efficiency", true, 1, g.efficiency_fwd, g.efficiency_bwd); !s) return s;
    for (const double x : {g.efficiency_fwd, g.efficiency_bwd})
      if (const auto why = implausible(Quantity::Efficiency, x, "efficiency"); !why.empty()) return e.error(why);
  }
  if (n.has("gemm_efficiency")) {
    CHARM_TRY_LET(ge, get_number(n, "gemm_efficiency", true, 0, false, false));
    if (const auto why = implausible(Quantity::Efficiency, ge, "gemm_efficiency"); !why.empty())
      return n.at("gemm_efficiency").error(why);
    g.gemm_efficiency = ge;
  }
  CHARM_TRY_LET(half, get_quantity(n, "half_tokens", false, 0, Quantity::HalfTokens));
  g.half_tokens = half;
  CHARM_TRY_LET(launch, get_quantity(n, "launch_us", false, 0, Quantity::Latency));
  g.launch_us = launch;
  CHARM_TRY_LET(mem, get_number(n, "memory_gb", false, 0, false, true));
  // Nobody has a GPU with 10 TB; a number that large is bytes or MiB written where GB belong.
  if (mem > 1e4) return n.at("memory_gb").error(fmt::format("is in GB (1e9 bytes); {} looks like bytes or MiB", mem));
  g.memory_gb = mem;
  if (over.kernel_table) {  // the user's own timings win over the file's efficiency and library
    g.kernel = over.kernel_table;
    src.kernel = fmt::format("{} (the user's kernel timings, {} rows)", over.kernel_table->library,
                             over.kernel_table->rows.size());
    return {};
  }
  if (!over.kernel.empty() && n.has("efficiency")) {  // --kernel asks for the library's table over the flat number
    g.efficiency_fwd = g.efficiency_bwd = 1;
    return resolve_kernel(n, library, g, t.stack, src, /*flat_allowed=*/false);
  }
  return resolve_kernel(n, library, g, t.stack, src, true);
}

}  // namespace charm::topo::reader
