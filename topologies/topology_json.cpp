#include "topologies/topology_json.hpp"

#include "scheduler/support/json_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "scheduler/support/input_file.hpp"

namespace charm::topo {

namespace {

using nlohmann::json;

/// A cursor into the document that knows its own JSON path, for error messages.
struct Node {
  const json& j;
  std::string path;
  const std::string& src;

  [[nodiscard]] Error error(const std::string& what) const { return Error{src, fmt::format("{}: {}", path, what)}; }
  [[nodiscard]] bool has(const char* key) const { return j.is_object() && j.contains(key); }
  [[nodiscard]] Node at(const char* key) const { return {j.at(key), path.empty() ? key : path + "." + key, src}; }
  [[nodiscard]] Node at(std::size_t i) const { return {j.at(i), fmt::format("{}[{}]", path, i), src}; }
  [[nodiscard]] Error missing(const char* key) const {
    return Error{src, fmt::format("{}: missing required field", path.empty() ? std::string(key) : path + "." + key)};
  }
};

template <class T>
using Ex = Expected<T>;

/// Unknown fields are rejected, not ignored: a misspelt "bandwith_gbps" would
/// otherwise silently fall back to a default (docs/errors.md).
Status check_fields(const Node& n, std::initializer_list<const char*> known, const char* form = nullptr) {
  if (!n.j.is_object()) return {};
  for (const auto& item : n.j.items()) {
    bool ok = false;
    for (const char* k : known) ok = ok || item.key() == k;
    if (ok) continue;
    std::string list;
    for (const char* k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
    const std::string path = n.path.empty() ? item.key() : n.path + "." + item.key();
    return Error{n.src, fmt::format("{}: unknown field{} (expected one of: {})", path, form ? form : "", list)};
  }
  return {};
}

/// An explicit topology's routes are a GPU-by-GPU table; beyond this the table alone is gigabytes.
constexpr long kMaxGpus = 4096;
/// A generated cluster's routes come from its nodes (topology.hpp, BlockLayout): the
/// table is one node's GPUs by two nodes', so the bound is a node's size and the
/// largest --uniform cluster.
constexpr long kMaxGeneratedGpus = 1L << 16;

Ex<double> get_number(const Node& n, const char* key, bool required, double def, bool positive, bool non_negative) {
  if (!n.has(key)) {
    if (required) return n.missing(key);
    return def;
  }
  const Node v = n.at(key);
  if (!v.j.is_number()) return v.error(fmt::format("must be a number, got {}", v.j.dump()));
  const double x = v.j.get<double>();
  // JSON has no NaN, but 1e400 parses to infinity.
  if (!std::isfinite(x)) return v.error(fmt::format("must be a finite number, got {}", v.j.dump()));
  if (positive && !(x > 0)) return v.error(fmt::format("must be > 0, got {}", v.j.dump()));
  if (non_negative && !(x >= 0)) return v.error(fmt::format("must be >= 0, got {}", v.j.dump()));
  return x;
}

/// A physical number (topology.hpp's plausible ranges); `zero_is_none` lets 0 stand for "no limit" or "free".
Ex<double> get_quantity(const Node& n, const char* key, bool required, double def, Quantity q,
                        bool zero_is_none = false) {
  auto x = get_number(n, key, required, def, false, false);
  if (!x || !n.has(key) || (zero_is_none && *x == 0)) return x;
  if (const auto why = implausible(q, *x, key); !why.empty()) return n.at(key).error(why);
  return x;
}

/// An integer in [min_value, max_value]. JSON integers have no width: one past
/// int64 is held as unsigned and reported as written, never wrapped to a negative.
Ex<long> int_in(const Node& v, long min_value, long max_value) {
  if (!v.j.is_number_integer()) return v.error(fmt::format("must be an integer, got {}", v.j.dump()));
  if (v.j.is_number_unsigned() && v.j.get<std::uint64_t>() > static_cast<std::uint64_t>(max_value))
    return v.error(fmt::format("must be <= {}, got {}", max_value, v.j.dump()));
  const long x = v.j.get<long>();
  if (x < min_value) return v.error(fmt::format("must be >= {}, got {}", min_value, x));
  if (x > max_value) return v.error(fmt::format("must be <= {}, got {}", max_value, x));
  return x;
}

Ex<long> get_int(const Node& n, const char* key, bool required, long def, long min_value,
                 long max_value = std::numeric_limits<long>::max()) {
  if (!n.has(key)) {
    if (required) return n.missing(key);
    return def;
  }
  return int_in(n.at(key), min_value, max_value);
}

/// A string that may reach a terminal or a generated script: control characters (newline, ESC, NUL, ...) are
/// refused rather than printed raw.
std::size_t control_character_at(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i)
    if (const auto c = static_cast<unsigned char>(s[i]); c < 0x20 || c == 0x7f) return i;
  return std::string::npos;
}

Ex<std::string> text_of(const Node& v, const char* what = "a string") {
  if (!v.j.is_string()) return v.error(fmt::format("must be {}, got {}", what, v.j.dump()));
  const auto& s = v.j.get_ref<const std::string&>();
  if (const auto i = control_character_at(s); i != std::string::npos)
    return v.error(fmt::format("holds a control character (byte {:#04x} at offset {}): names and notes are "
                               "printed to terminals and scripts, so they must be plain text",
                               static_cast<unsigned char>(s[i]), i));
  return s;
}

Ex<std::string> get_string(const Node& n, const char* key, bool required, const std::string& def) {
  if (!n.has(key)) {
    if (required) return n.missing(key);
    return def;
  }
  return text_of(n.at(key));
}

#define TRY_ASSIGN(var, expr)                                                                                          \
  auto var##_ex = (expr);                                                                                              \
  if (!var##_ex) return var##_ex.error();                                                                              \
  auto var = std::move(var##_ex).value()

/// "sm_count" and "kernel": a library name, or {"library", "fwd": {"tile_q", "tile_kv"}, "bwd": {...}} over the
/// architecture's defaults; the library named (empty: the stack's default) goes to `library`.
Status parse_kernel_shape(const Node& n, GpuSpec& g, std::string& library) {
  TRY_ASSIGN(sms, get_int(n, "sm_count", false, g.sm_count, 0, 100000));
  g.sm_count = static_cast<int>(sms);
  if (!n.has("kernel")) return {};
  const Node k = n.at("kernel");
  if (k.j.is_string()) {
    TRY_ASSIGN(name, text_of(k));
    library = name;
    return {};
  }
  if (!k.j.is_object())
    return k.error("must be a library name (fa2, fa3, cudnn) or an object {\"library\", \"fwd\": {\"tile_q\", "
                   "\"tile_kv\"}, \"bwd\": {...}}");
  if (auto s = check_fields(k, {"library", "fwd", "bwd"}); !s) return s;
  TRY_ASSIGN(name, get_string(k, "library", false, ""));
  library = name;
  for (const char* pass : {"fwd", "bwd"}) {
    if (!k.has(pass)) continue;
    const Node p = k.at(pass);
    if (!p.j.is_object()) return p.error("must be an object {\"tile_q\", \"tile_kv\"}");
    if (auto s = check_fields(p, {"tile_q", "tile_kv"}); !s) return s;
    KernelTile& t = std::string_view(pass) == "fwd" ? g.tile_fwd : g.tile_bwd;
    TRY_ASSIGN(q, get_int(p, "tile_q", t.q == 0, t.q, 1, 4096));
    TRY_ASSIGN(kv, get_int(p, "tile_kv", t.kv == 0, t.kv, 1, 4096));
    t = {static_cast<int>(q), static_cast<int>(kv)};
  }
  return {};
}

/// A per-pass pair at `key`: one number for both passes, or {"fwd", "bwd"}. With `fwd_required` the object's
/// "fwd" must be there and "bwd" defaults to it; otherwise both default to `dflt`.
Status parse_pass_pair(const Node& n, const char* key, bool fwd_required, double dflt, double& fwd, double& bwd) {
  const Node e = n.at(key);
  if (e.j.is_number()) {
    TRY_ASSIGN(x, get_number(n, key, true, dflt, true, false));
    fwd = bwd = x;
  } else if (e.j.is_object()) {
    if (auto s = check_fields(e, {"fwd", "bwd"}); !s) return s;
    TRY_ASSIGN(f, get_number(e, "fwd", fwd_required, dflt, true, false));
    TRY_ASSIGN(b, get_number(e, "bwd", false, fwd_required ? f : dflt, true, false));
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

/// The preset a "stack" names, with the fields the object gives over it.
Status parse_stack_fields(const Node& root, StackSpec& st) {
  if (!root.has("stack")) {
    st = stack_preset(kDefaultStack).value();
    return {};
  }
  const Node n = root.at("stack");
  if (n.j.is_string()) {
    TRY_ASSIGN(name, text_of(n));
    auto p = stack_preset(name);
    if (!p) return n.error(p.error().what);
    st = *p;
    return {};
  }
  if (!n.j.is_object()) return n.error("must be a preset name or an object {\"preset\", \"step_us\", ...}");
  if (auto s = check_fields(n, {"preset", "host_us", "step_us", "update_passes", "bwd_update_passes", "merge_traffic",
                                "message_us", "compute_slowdown", "comm_slowdown", "intra_flow_gbps",
                                "intra_injection_gbps"});
      !s)
    return s;
  TRY_ASSIGN(name, get_string(n, "preset", false, std::string(kDefaultStack)));
  auto p = stack_preset(name);
  if (!p) return n.at("preset").error(p.error().what);
  st = *p;
  TRY_ASSIGN(host, get_quantity(n, "host_us", false, st.host_us, Quantity::Latency));
  TRY_ASSIGN(step, get_quantity(n, "step_us", false, st.step_us, Quantity::Latency));
  TRY_ASSIGN(msg, get_quantity(n, "message_us", false, st.message_us, Quantity::Latency));
  TRY_ASSIGN(passes, get_number(n, "update_passes", false, st.update_passes, false, true));
  if (passes > 100) return n.at("update_passes").error(fmt::format("must be in [0, 100] passes, got {}", passes));
  st.update_passes = passes;
  TRY_ASSIGN(bwd_passes, get_number(n, "bwd_update_passes", false, st.bwd_update_passes, false, true));
  if (bwd_passes > 100)
    return n.at("bwd_update_passes").error(fmt::format("must be in [0, 100] passes, got {}", bwd_passes));
  st.bwd_update_passes = bwd_passes;
  TRY_ASSIGN(traffic, get_number(n, "merge_traffic", false, st.merge_traffic, true, false));
  if (traffic < 0.1 || traffic > 100)
    return n.at("merge_traffic").error(fmt::format("must be in [0.1, 100] fused passes, got {}", traffic));
  TRY_ASSIGN(cs, get_number(n, "compute_slowdown", false, st.compute_slowdown, false, true));
  TRY_ASSIGN(ms, get_number(n, "comm_slowdown", false, st.comm_slowdown, false, true));
  for (const auto& [key, x] : {std::pair{"compute_slowdown", cs}, std::pair{"comm_slowdown", ms}})
    if (x > 10) return n.at(key).error(fmt::format("must be in [0, 10] (1 = twice as long), got {}", x));
  TRY_ASSIGN(flow, get_quantity(n, "intra_flow_gbps", false, st.intra_flow_gbps, Quantity::Bandwidth, true));
  TRY_ASSIGN(inj, get_quantity(n, "intra_injection_gbps", false, st.intra_injection_gbps, Quantity::Bandwidth, true));
  st.host_us = host;
  st.step_us = step;
  st.message_us = msg;
  st.merge_traffic = traffic;
  st.compute_slowdown = cs;
  st.comm_slowdown = ms;
  st.intra_flow_gbps = flow;
  st.intra_injection_gbps = inj;
  return {};
}

/// "model": the architecture table's SMs, tiles and family; "assume": a known part to borrow them from.
Status parse_gpu_model(const Node& n, const std::string& assume_flag, GpuSpec& g, ModelSources& src) {
  TRY_ASSIGN(model, get_string(n, "model", false, "gpu"));
  g.model = model;
  TRY_ASSIGN(file_assume, get_string(n, "assume", false, ""));
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
      return assume_flag.empty() ? at.error("assume: " + why) : Error{"--assume-gpu", why};
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
    TRY_ASSIGN(x, get_quantity(n, "tflops", true, 0, Quantity::Tflops));
    g.tflops_bf16 = g.tflops_fp16 = x;
    g.tflops_fp32 = x / 2;
  } else if (tf.j.is_object()) {
    if (auto s = check_fields(tf, {"bf16", "fp16", "fp32"}); !s) return s;
    TRY_ASSIGN(bf16, get_quantity(tf, "bf16", true, 0, Quantity::Tflops));
    TRY_ASSIGN(fp16, get_quantity(tf, "fp16", false, bf16, Quantity::Tflops));
    TRY_ASSIGN(fp32, get_quantity(tf, "fp32", false, bf16 / 2, Quantity::Tflops));
    g.tflops_bf16 = bf16;
    g.tflops_fp16 = fp16;
    g.tflops_fp32 = fp32;
  } else {
    return tf.error("must be a number or an object {\"bf16\", \"fp16\", \"fp32\"}");
  }
  TRY_ASSIGN(hbm, get_quantity(n, "hbm_gbps", false, 0, Quantity::Bandwidth, /*zero_is_none=*/true));
  g.hbm_gbps = hbm;
  if (n.has("efficiency")) {
    const Node e = n.at("efficiency");
    if (auto s = parse_pass_pair(n, "efficiency", true, 1, g.efficiency_fwd, g.efficiency_bwd); !s) return s;
    for (const double x : {g.efficiency_fwd, g.efficiency_bwd})
      if (const auto why = implausible(Quantity::Efficiency, x, "efficiency"); !why.empty()) return e.error(why);
  }
  if (n.has("gemm_efficiency")) {
    TRY_ASSIGN(ge, get_number(n, "gemm_efficiency", true, 0, false, false));
    if (const auto why = implausible(Quantity::Efficiency, ge, "gemm_efficiency"); !why.empty())
      return n.at("gemm_efficiency").error(why);
    g.gemm_efficiency = ge;
  }
  TRY_ASSIGN(half, get_quantity(n, "half_tokens", false, 0, Quantity::HalfTokens));
  g.half_tokens = half;
  TRY_ASSIGN(launch, get_quantity(n, "launch_us", false, 0, Quantity::Latency));
  g.launch_us = launch;
  TRY_ASSIGN(mem, get_number(n, "memory_gb", false, 0, false, true));
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

/// bandwidth_gbps (required, > 0), latency_us (>= 0, default 0), sharing (shared | dedicated); the link's
/// kind where the form lets the file say it (explicit links; the generator's intra links).
Status parse_link_params(const Node& n, Link& l, const char* default_sharing) {
  if (!n.j.is_object()) return n.error("must be an object");
  if (n.path == "inter") {
    if (auto s = check_fields(n, {"bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps", "injection_gbps", "nic",
                                  "gpus_per_nic", "pcie_gbps"});
        !s)
      return s;
  } else if (n.path == "intra") {
    if (auto s =
            check_fields(n, {"bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps", "injection_gbps", "kind"});
        !s)
      return s;
  } else if (default_sharing != nullptr) {
    if (auto s = check_fields(n, {"bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps", "injection_gbps"}); !s)
      return s;
  } else {
    if (auto s = check_fields(n, {"a", "b", "bandwidth_gbps", "latency_us", "sharing", "per_flow_gbps",
                                  "injection_gbps", "kind", "name"});
        !s)
      return s;
  }
  TRY_ASSIGN(bw, get_quantity(n, "bandwidth_gbps", true, 0, Quantity::Bandwidth));
  TRY_ASSIGN(lat, get_quantity(n, "latency_us", false, 0, Quantity::Latency));
  TRY_ASSIGN(sharing, get_string(n, "sharing", default_sharing == nullptr, default_sharing ? default_sharing : ""));
  TRY_ASSIGN(per_flow, get_quantity(n, "per_flow_gbps", false, 0, Quantity::Bandwidth, /*zero_is_none=*/true));
  l.bandwidth_gbps = bw;
  l.latency_us = lat;
  l.per_flow_gbps = per_flow;
  TRY_ASSIGN(injection, get_quantity(n, "injection_gbps", false, 0, Quantity::Bandwidth, /*zero_is_none=*/true));
  l.injection_gbps = injection;
  if (sharing == "shared")
    l.sharing = Sharing::Shared;
  else if (sharing == "dedicated")
    l.sharing = Sharing::Dedicated;
  else
    return n.at("sharing").error(fmt::format("must be \"shared\" or \"dedicated\", got \"{}\"", sharing));
  if (n.has("kind")) {
    TRY_ASSIGN(kind, get_string(n, "kind", true, ""));
    const auto k = link_kind_from(kind);
    if (n.path == "intra") {
      if (k != LinkKind::NvLink && k != LinkKind::Pcie)
        return n.at("kind").error(fmt::format("must be \"nvlink\" or \"pcie\", got \"{}\"", kind));
    } else if (!k) {
      return n.at("kind").error(
          fmt::format("must be \"nvlink\", \"pcie\", \"host\", \"nic\" or \"fabric\", got \"{}\"", kind));
    }
    l.kind = *k;
  }
  return {};
}

/// The "gpus" of an explicit topology: a count, or names and places (one integer per level).
Status read_explicit_gpus(const Node& root, Topology& t) {
  if (!root.has("gpus")) return root.missing("gpus");
  const Node gp = root.at("gpus");
  if (gp.j.is_number_integer()) {
    TRY_ASSIGN(count, get_int(root, "gpus", true, 0, 1, kMaxGpus));
    for (long g = 0; g < count; ++g) {
      t.vertex_names.push_back(fmt::format("gpu{}", g));
      t.gpu_place.push_back(std::vector<int>(t.levels.size(), 0));
    }
  } else if (gp.j.is_array()) {
    if (gp.j.empty()) return gp.error("must list at least one GPU");
    if (gp.j.size() > std::size_t(kMaxGpus))
      return gp.error(fmt::format("at most {} GPUs are supported, got {}", kMaxGpus, gp.j.size()));
    for (std::size_t i = 0; i < gp.j.size(); ++i) {
      const Node g = gp.at(i);
      if (g.j.is_string()) {
        TRY_ASSIGN(gname, text_of(g));
        t.vertex_names.push_back(std::move(gname));
        t.gpu_place.push_back(std::vector<int>(t.levels.size(), 0));
        continue;
      }
      if (!g.j.is_object()) return g.error("must be a name or an object {\"name\", \"place\"}");
      if (auto s = check_fields(g, {"name", "place"}); !s) return s;
      TRY_ASSIGN(nm, get_string(g, "name", false, fmt::format("gpu{}", i)));
      t.vertex_names.push_back(nm);
      std::vector<int> place;
      if (g.has("place")) {
        const Node p = g.at("place");
        if (!p.j.is_array() || p.j.size() != t.levels.size())
          return p.error(fmt::format("must be an array of {} integers (one per level)", t.levels.size()));
        for (std::size_t k = 0; k < p.j.size(); ++k) {
          if (!p.j[k].is_number_integer()) return p.at(k).error("must be an integer");
          TRY_ASSIGN(x, int_in(p.at(k), 0, std::numeric_limits<int>::max()));
          place.push_back(static_cast<int>(x));
        }
      } else {
        if (!t.levels.empty()) return g.missing("place");
      }
      t.gpu_place.push_back(std::move(place));
    }
  } else {
    return gp.error("must be a GPU count or an array of GPUs");
  }
  return {};
}

/// The "links" of an explicit topology, their ends named as GPUs or switches (`index`).
Status read_explicit_links(const Node& root, Topology& t, const std::map<std::string, int>& index) {
  if (!root.has("links")) return root.missing("links");
  const Node ln = root.at("links");
  if (!ln.j.is_array()) return ln.error("must be an array of links");
  for (std::size_t i = 0; i < ln.j.size(); ++i) {
    const Node l = ln.at(i);
    if (!l.j.is_object()) return l.error("must be an object");
    Link link;
    for (const char* end : {"a", "b"}) {
      TRY_ASSIGN(nm, get_string(l, end, true, ""));
      auto it = index.find(nm);
      if (it == index.end()) return l.at(end).error(fmt::format("unknown GPU or switch \"{}\"", nm));
      (end[0] == 'a' ? link.a : link.b) = it->second;
    }
    if (link.a == link.b) return l.error("a link needs two different ends");
    if (auto s = parse_link_params(l, link, nullptr); !s) return s.error();
    TRY_ASSIGN(nm, get_string(l, "name", false, ""));
    link.name = nm;
    t.links.push_back(link);
  }
  return {};
}

Status parse_explicit(const Node& root, Topology& t, int& num_gpus_out) {
  if (auto s = check_fields(root,
                            {"schema", "name", "notes", "gpu", "stack", "levels", "gpus", "switches", "links", "domain",
                             "routes", "calibration"},
                            " in an explicit topology (one with \"gpus\" and \"links\")");
      !s)
    return s;
  // levels
  if (root.has("levels")) {
    const Node lv = root.at("levels");
    if (!lv.j.is_array()) return lv.error("must be an array of level names, outermost first");
    for (std::size_t i = 0; i < lv.j.size(); ++i) {
      TRY_ASSIGN(level, text_of(lv.at(i)));
      t.levels.push_back(std::move(level));
    }
  }
  if (auto s = read_explicit_gpus(root, t); !s) return s;
  const int num_gpus = static_cast<int>(t.vertex_names.size());
  std::map<std::string, int> index;
  if (root.has("switches")) {
    const Node sw = root.at("switches");
    if (!sw.j.is_array()) return sw.error("must be an array of names");
    for (std::size_t i = 0; i < sw.j.size(); ++i) {
      TRY_ASSIGN(swname, text_of(sw.at(i)));
      t.vertex_names.push_back(std::move(swname));
    }
  }
  for (std::size_t v = 0; v < t.vertex_names.size(); ++v) {
    if (!index.emplace(t.vertex_names[v], int(v)).second)
      return Error{root.src, fmt::format("{}: duplicate vertex name \"{}\"",
                                         v < std::size_t(num_gpus) ? "gpus" : "switches", t.vertex_names[v])};
  }
  if (auto s = read_explicit_links(root, t, index); !s) return s;
  // Kinds rank routes against each other, so a link without one cannot be ranked against those with one.
  const auto has_kind = [&](const Link& l) { return l.kind != LinkKind::Unspecified; };
  if (const auto k = std::find_if(t.links.begin(), t.links.end(), has_kind); k != t.links.end())
    if (const auto u = std::find_if_not(t.links.begin(), t.links.end(), has_kind); u != t.links.end())
      return Error{root.src,
                   fmt::format("links[{}].kind: missing, but links[{}] has one: give every link a kind or none",
                               u - t.links.begin(), k - t.links.begin())};
  if (root.has("domain")) {
    TRY_ASSIGN(d, get_string(root, "domain", true, ""));
    auto it = std::find(t.levels.begin(), t.levels.end(), d);
    if (it == t.levels.end()) return root.at("domain").error(fmt::format("\"{}\" is not one of the levels", d));
    t.domain_level = static_cast<int>(it - t.levels.begin());
  } else if (!t.levels.empty()) {
    t.domain_level = 0;
  }
  num_gpus_out = num_gpus;
  return {};
}

/// What NCCL point-to-point attains on a generation's NVLink, as fractions of the link's per-direction rate
/// (public nccl-tests figures): all of a GPU's concurrent transfers together (the injection), and one peer's
/// transfer alone in NCCL's default configuration (a few channels). Hopper (NVLink 4, 450 GB/s): ring
/// all-reduce bus bandwidth 369 GB/s on 8 x H100 without NVLink SHARP (NVIDIA/nccl-tests issue 309), 0.82 of
/// the link; sendrecv between two H100s about 80 GB/s in the default configuration, up to 180 with more
/// channels (NVIDIA/nccl-tests issue 268), 0.18. Ampere (NVLink 3, 300 GB/s): all-reduce 232 GB/s on 8 x A100
/// (NVIDIA/nccl-tests issue 175), 0.77; one peer's default share is not published: Hopper's ratio of one peer
/// to the aggregate (80 / 369) is assumed, 0.17.
struct NcclAttainment {
  double injection = 0, per_flow = 0;
  std::string_view source;
  bool per_flow_assumed = false;
};

std::optional<NcclAttainment> nccl_nvlink_attainment(std::string_view family) {
  if (family == "hopper")
    return NcclAttainment{369.0 / 450, 80.0 / 450, "nccl-tests on H100 NVLink 4, issues 309 and 268", false};
  if (family == "ampere")
    return NcclAttainment{232.0 / 300, 232.0 / 300 * 80 / 369, "nccl-tests on A100 NVLink 3, issue 175", true};
  return std::nullopt;
}

/// On a dedicated GPU link (NVLink through NVSwitch) the wire is rarely the limit: what the collective
/// library's channels attain is. Where the file leaves those fields out, the stack's limits apply (a fitted
/// stack's), else NCCL's published attainment on the GPU family's NVLink.
void apply_link_limits(const Node& intra_node, Topology& t, Link& intra) {
  const StackSpec& st = t.stack;
  if (intra.sharing != Sharing::Dedicated) {
    t.sources.links = "the file's link rates (shared links divide them max-min fairly)";
    return;
  }
  const bool own_flow = intra_node.has("per_flow_gbps"), own_injection = intra_node.has("injection_gbps");
  if (own_flow || own_injection || st.intra_flow_gbps > 0 || st.intra_injection_gbps > 0) {
    if (!own_flow && st.intra_flow_gbps > 0) intra.per_flow_gbps = std::min(st.intra_flow_gbps, intra.bandwidth_gbps);
    if (!own_injection && st.intra_injection_gbps > 0)
      intra.injection_gbps = std::min(st.intra_injection_gbps, intra.bandwidth_gbps);
    t.sources.links = fmt::format("the file's link rates; NVLink attained {} GB/s per GPU ({})",
                                  intra.injection_gbps > 0 ? fmt::format("{:.4g}", intra.injection_gbps) : "all",
                                  own_injection ? "the file's" : "the stack's");
    return;
  }
  const auto nccl = nccl_nvlink_attainment(t.gpu.family);
  if (!nccl) {
    t.sources.links = "the file's link rates";
    t.sources.assumed.push_back("NVLink attained at its full rate (no nccl-tests figures for this GPU family)");
    return;
  }
  intra.injection_gbps = nccl->injection * intra.bandwidth_gbps;
  intra.per_flow_gbps = nccl->per_flow * intra.bandwidth_gbps;
  t.sources.links = fmt::format("the file's link rates; NVLink attains {:.4g} GB/s per GPU, {:.4g} per peer ({})",
                                intra.injection_gbps, intra.per_flow_gbps, nccl->source);
  if (nccl->per_flow_assumed) t.sources.assumed.push_back("NVLink 3 per-peer rate at NVLink 4's per-peer share");
}

/// A link rate no link of its kind carries a direction, with the unit slip it likely is; empty when plausible.
/// Per direction: a NIC at most 100 GB/s (800 Gb/s); PCIe 6.0 x16 121 GB/s (5.0: 63, Hopper's and Blackwell's
/// host interface); NVLink 3 (Ampere) 300 GB/s a GPU, NVLink 4 (Hopper) 450, NVLink 5 (Blackwell) 900 (NVIDIA's
/// datasheets give both directions together: 600, 900, 1800).
std::string unit_slip(LinkKind kind, double gbps, std::string_view family) {
  if (kind == LinkKind::Nic && gbps > 100)
    return fmt::format("{:g} GB/s a direction is more than any NIC carries (800 Gb/s is 100 GB/s): a NIC's line rate "
                       "in Gb/s is 1/8 of it in GB/s, and NCCL attains about 0.94 of that (400 Gb/s: 46-48 GB/s)",
                       gbps);
  if (kind == LinkKind::Pcie && gbps > 121)
    return fmt::format("{:g} GB/s a direction is more than PCIe 6.0 x16 carries (121 GB/s; 5.0 x16: 63): a rate in "
                       "Gb/s, or both directions added, is the likely slip",
                       gbps);
  if (kind != LinkKind::NvLink) return {};
  const double most = family == "ampere" ? 300 : family == "hopper" ? 450 : 900;
  const char* gen = family == "ampere" ? "NVLink 3" : family == "hopper" ? "NVLink 4" : "NVLink 5";
  if (gbps <= most) return {};
  return fmt::format("{:g} GB/s a direction is more than {} carries per GPU ({:g} GB/s; its datasheet's {:g} is both "
                     "directions added): the datasheet's figure, or a rate in Gb/s, is the likely slip",
                     gbps, gen, most, 2 * most);
}

/// A generated cluster's shape and link parameters, read from its file.
struct Generator {
  long nodes = 1, per_node = 1, numa = 1;
  Link intra, numa_link, inter;
  std::string nic = "per_gpu";
  long gpus_per_nic = 1;  // > 1: a NIC vertex shared by that many GPUs, each reaching it over PCIe
  Link nic_pcie;          // each GPU's own lanes to the switch the NIC sits on
};

/// The inter block: the NIC's link, how GPUs share NICs, the PCIe hop to a shared NIC.
Status read_inter(const Node& root, Generator& g) {
  if (!root.has("inter")) return root.missing("inter");
  const Node in = root.at("inter");
  if (auto s = parse_link_params(in, g.inter, "shared"); !s) return s.error();
  TRY_ASSIGN(n, get_string(in, "nic", false, "per_gpu"));
  if (n != "per_gpu" && n != "per_node")
    return in.at("nic").error(fmt::format("must be \"per_gpu\" or \"per_node\", got \"{}\"", n));
  g.nic = n;
  if (in.has("gpus_per_nic")) {
    if (in.has("nic")) return in.at("gpus_per_nic").error("give \"nic\" or \"gpus_per_nic\", not both");
    TRY_ASSIGN(k, get_int(in, "gpus_per_nic", true, 1, 1));
    if (g.per_node % k != 0)
      return in.at("gpus_per_nic").error(fmt::format("must divide gpus_per_node ({}), got {}", g.per_node, k));
    g.gpus_per_nic = k;
  }
  // PCIe 5.0 x16: 64 GB/s per direction, the datasheet rate of the GPU-to-NIC hop.
  TRY_ASSIGN(pcie, get_quantity(in, "pcie_gbps", false, 64, Quantity::Bandwidth));
  if (in.has("pcie_gbps") && g.gpus_per_nic == 1)
    return in.at("pcie_gbps").error("applies with \"gpus_per_nic\" > 1 only (a NIC per GPU is one link)");
  g.nic_pcie.bandwidth_gbps = pcie;
  return {};
}

/// The link blocks (intra, numa, inter) and the stack limits the intra block carries.
Status read_generator_links(const Node& root, Topology& t, Generator& g) {
  if (!root.has("intra")) return root.missing("intra");
  if (auto s = parse_link_params(root.at("intra"), g.intra, "dedicated"); !s) return s.error();
  // Dedicated GPU links are NVLink through NVSwitch, shared ones a PCIe switch,
  // unless intra.kind says otherwise; within a node both rank before the host
  // bridge and the NIC, so the choice only names the links.
  if (g.intra.kind == LinkKind::Unspecified)
    g.intra.kind = g.intra.sharing == Sharing::Dedicated ? LinkKind::NvLink : LinkKind::Pcie;
  if (const auto why = unit_slip(g.intra.kind, g.intra.bandwidth_gbps, t.gpu.family);
      !why.empty() && root.at("intra").has("bandwidth_gbps"))
    t.warnings.push_back(root.at("intra").at("bandwidth_gbps").error(why).message());
  apply_link_limits(root.at("intra"), t, g.intra);
  g.numa_link.kind = LinkKind::Host;
  g.inter.kind = LinkKind::Nic;  // one link stands for the NIC and its port on the non-blocking fabric
  // A block the shape does not use is read past (a sweep over nodes reaches 1 with the file's inter block):
  // said in a warning, since its numbers change nothing.
  if (g.numa == 1 && root.has("numa"))
    t.warnings.push_back(root.at("numa")
                             .error("ignored: it applies with numa_per_node > 1 only (one NUMA node per node has no "
                                    "links between NUMA nodes, so its numbers change nothing)")
                             .message());
  if (g.nodes == 1 && root.has("inter"))
    t.warnings.push_back(root.at("inter")
                             .error("ignored: it applies with nodes > 1 only (one node has no links between nodes, "
                                    "so its numbers change nothing)")
                             .message());
  if (g.numa > 1) {
    if (!root.has("numa")) return root.missing("numa");
    if (auto s = parse_link_params(root.at("numa"), g.numa_link, "shared"); !s) return s.error();
  }
  g.nic_pcie.kind = LinkKind::Pcie;
  g.nic_pcie.sharing = Sharing::Dedicated;
  if (g.nodes > 1) {
    if (auto s = read_inter(root, g); !s) return s;
    if (const auto why = unit_slip(LinkKind::Nic, g.inter.bandwidth_gbps, t.gpu.family); !why.empty())
      t.warnings.push_back(root.at("inter").at("bandwidth_gbps").error(why).message());
  }
  return {};
}

/// The vertices (GPUs, switches, host bridges, NICs, the fabric) and links of the generated
/// cluster, node by node, and its block structure.
void build_generator_graph(const Generator& gen, Topology& t) {
  t.levels = {"node", "numa"};
  const long per_numa = gen.per_node / gen.numa;
  const int G = static_cast<int>(gen.nodes * gen.per_node);
  for (long nd = 0; nd < gen.nodes; ++nd)
    for (long g = 0; g < gen.per_node; ++g) {
      t.vertex_names.push_back(fmt::format("n{}.gpu{}", nd, g));
      t.gpu_place.push_back({int(nd), int(g / per_numa)});
    }
  auto add_vertex = [&](std::string name) {
    t.vertex_names.push_back(std::move(name));
    return static_cast<int>(t.vertex_names.size()) - 1;
  };
  const int fabric = gen.nodes > 1 ? add_vertex("fabric") : -1;
  for (long nd = 0; nd < gen.nodes; ++nd) {
    std::vector<int> sw;
    for (long m = 0; m < gen.numa; ++m)
      sw.push_back(add_vertex(gen.numa > 1 ? fmt::format("n{}.numa{}.switch", nd, m) : fmt::format("n{}.switch", nd)));
    const int host = gen.numa > 1 ? add_vertex(fmt::format("n{}.host", nd)) : sw[0];
    for (long g = 0; g < gen.per_node; ++g) {
      Link l = gen.intra;
      l.a = int(nd * gen.per_node + g);
      l.b = sw[std::size_t(g / per_numa)];
      t.links.push_back(l);
    }
    if (gen.numa > 1)
      for (int s : sw) {
        Link l = gen.numa_link;
        l.a = s;
        l.b = host;
        t.links.push_back(l);
      }
    if (gen.nodes > 1 && gen.gpus_per_nic > 1) {
      for (long k = 0; k < gen.per_node / gen.gpus_per_nic; ++k) {
        const int nic_v = add_vertex(fmt::format("n{}.nic{}", nd, k));
        for (long g = k * gen.gpus_per_nic; g < (k + 1) * gen.gpus_per_nic; ++g) {
          Link l = gen.nic_pcie;
          l.a = int(nd * gen.per_node + g);
          l.b = nic_v;
          t.links.push_back(l);
        }
        Link l = gen.inter;
        l.a = nic_v;
        l.b = fabric;
        t.links.push_back(l);
      }
    } else if (gen.nodes > 1) {
      if (gen.nic == "per_gpu") {
        for (long g = 0; g < gen.per_node; ++g) {
          Link l = gen.inter;
          l.a = int(nd * gen.per_node + g);
          l.b = fabric;
          t.links.push_back(l);
        }
      } else {
        Link l = gen.inter;
        l.a = host;
        l.b = fabric;
        t.links.push_back(l);
      }
    }
  }
  // Nodes are copies of one another joined by the fabric: their vertices and
  // links were added node by node above, after the GPUs and the fabric.
  if (gen.nodes > 1) {
    const auto per_node_vertices = (t.vertex_names.size() - std::size_t(G) - 1) / std::size_t(gen.nodes);
    t.blocks = {int(gen.nodes), int(gen.per_node), int(t.links.size() / std::size_t(gen.nodes)), G + 1,
                int(per_node_vertices)};
  }
}

Status parse_generator(const Node& root, Topology& t, int& num_gpus_out) {
  if (auto s = check_fields(root,
                            {"schema", "name", "notes", "gpu", "stack", "nodes", "gpus_per_node", "numa_per_node",
                             "intra", "numa", "inter", "domain", "routes", "calibration"},
                            " in a generated topology (one with \"nodes\")");
      !s)
    return s;
  TRY_ASSIGN(nodes, get_int(root, "nodes", true, 1, 1, kMaxGeneratedGpus));
  TRY_ASSIGN(per_node, get_int(root, "gpus_per_node", true, 1, 1, kMaxGpus));
  if (nodes * per_node > kMaxGeneratedGpus)
    return root.at("gpus_per_node")
        .error(fmt::format("nodes x gpus_per_node = {} x {}: at most {} GPUs are supported", nodes, per_node,
                           kMaxGeneratedGpus));
  TRY_ASSIGN(numa, get_int(root, "numa_per_node", false, 1, 1, kMaxGpus));
  if (per_node % numa != 0)
    return root.at("numa_per_node").error(fmt::format("must divide gpus_per_node ({}), got {}", per_node, numa));
  Generator g;
  g.nodes = nodes;
  g.per_node = per_node;
  g.numa = numa;
  if (auto s = read_generator_links(root, t, g); !s) return s;
  build_generator_graph(g, t);
  const int G = static_cast<int>(nodes * per_node);
  std::string dflt = nodes > 1 ? "node" : numa > 1 ? "numa" : "none";
  TRY_ASSIGN(domain, get_string(root, "domain", false, dflt));
  if (domain == "node")
    t.domain_level = nodes > 1 ? 0 : -1;
  else if (domain == "numa")
    t.domain_level = 1;
  else if (domain == "none")
    t.domain_level = -1;
  else
    return root.at("domain").error(fmt::format("must be \"node\", \"numa\" or \"none\", got \"{}\"", domain));
  num_gpus_out = G;
  return {};
}

/// "routes": [{"src", "dst", "via": [switch, ...]}] fixes the route of a GPU
/// pair; each also fixes its reverse unless the file gives that one too. Two
/// vertices joined by several links use the first of them in the file.
Status parse_routes(const Node& root, Topology& t, int num_gpus) {
  if (!root.has("routes")) return {};
  const Node rs = root.at("routes");
  if (!rs.j.is_array()) return rs.error("must be an array of routes {\"src\", \"dst\", \"via\"}");
  std::map<std::string, int> index;
  for (std::size_t v = 0; v < t.vertex_names.size(); ++v) index.emplace(t.vertex_names[v], int(v));
  std::map<std::pair<int, int>, std::int32_t> channel;
  for (std::size_t i = 0; i < t.links.size(); ++i) {
    channel.emplace(std::pair{t.links[i].a, t.links[i].b}, std::int32_t(2 * i));
    channel.emplace(std::pair{t.links[i].b, t.links[i].a}, std::int32_t(2 * i + 1));
  }
  std::map<std::pair<int, int>, std::size_t> given;
  for (std::size_t i = 0; i < rs.j.size(); ++i) {
    const Node r = rs.at(i);
    if (!r.j.is_object()) return r.error("must be an object {\"src\", \"dst\", \"via\"}");
    if (auto s = check_fields(r, {"src", "dst", "via"}); !s) return s;
    const auto gpu = [&](const char* key) -> Ex<int> {
      TRY_ASSIGN(nm, get_string(r, key, true, ""));
      const auto it = index.find(nm);
      if (it == index.end()) return r.at(key).error(fmt::format("unknown GPU \"{}\"", nm));
      if (it->second >= num_gpus) return r.at(key).error(fmt::format("\"{}\" is a switch, not a GPU", nm));
      return it->second;
    };
    TRY_ASSIGN(src, gpu("src"));
    TRY_ASSIGN(dst, gpu("dst"));
    if (src == dst)
      return r.at("dst").error(fmt::format("\"{}\" is also the source", t.vertex_names[std::size_t(dst)]));
    std::vector<int> stops{src};
    std::vector<std::string> stop_path{r.at("src").path};
    if (r.has("via")) {
      const Node via = r.at("via");
      if (!via.j.is_array()) return via.error("must be an array of switch names");
      for (std::size_t k = 0; k < via.j.size(); ++k) {
        const Node h = via.at(k);
        if (!h.j.is_string()) return h.error(fmt::format("must be a switch name, got {}", h.j.dump()));
        const auto nm = h.j.get<std::string>();
        const auto it = index.find(nm);
        if (it == index.end()) return h.error(fmt::format("unknown switch \"{}\"", nm));
        if (it->second < num_gpus)
          return h.error(fmt::format("\"{}\" is a GPU: a route never passes through another GPU", nm));
        if (std::find(stops.begin(), stops.end(), it->second) != stops.end())
          return h.error(fmt::format("\"{}\" comes twice: a route passes a switch once", nm));
        stops.push_back(it->second);
        stop_path.push_back(h.path);
      }
    }
    stops.push_back(dst);
    stop_path.push_back(r.at("dst").path);
    if (stops.size() - 1 > std::size_t(kMaxHops))
      return r.at("via").error(fmt::format("{} hops, more than the {} supported", stops.size() - 1, kMaxHops));
    RouteOverride o{src, dst, {}};
    for (std::size_t k = 1; k < stops.size(); ++k) {
      const auto it = channel.find({stops[k - 1], stops[k]});
      if (it == channel.end())
        return Error{root.src,
                     fmt::format("{}: no link joins \"{}\" and \"{}\"", stop_path[k],
                                 t.vertex_names[std::size_t(stops[k - 1])], t.vertex_names[std::size_t(stops[k])])};
      o.channels.push_back(it->second);
    }
    if (const auto [it, fresh] = given.emplace(std::pair{src, dst}, i); !fresh)
      return r.error(fmt::format("a second route from \"{}\" to \"{}\" (routes[{}] is the first)",
                                 t.vertex_names[std::size_t(src)], t.vertex_names[std::size_t(dst)], it->second));
    t.route_overrides.push_back(std::move(o));
  }
  const std::size_t m = t.route_overrides.size();
  for (std::size_t k = 0; k < m; ++k) {
    RouteOverride back{t.route_overrides[k].dst, t.route_overrides[k].src, t.route_overrides[k].channels};
    if (given.count({back.src, back.dst}) != 0) continue;
    std::reverse(back.channels.begin(), back.channels.end());
    for (auto& ch : back.channels) ch ^= 1;  // the other direction of the same link
    t.route_overrides.push_back(std::move(back));
  }
  return {};
}

}  // namespace

Expected<Topology> parse_topology(const nlohmann::json& j, const std::string& source, const GpuOverrides& over) {
  const Node root{j, "", source};
  if (!j.is_object()) return Error{source, "the topology must be a JSON object"};
  Topology t;
  auto name_ex = get_string(root, "name", false, source);
  if (!name_ex) return name_ex.error();
  // A topology without a name is named after its file, and a name reaches terminals, scripts and CSV rows.
  if (const auto i = control_character_at(name_ex.value()); i != std::string::npos)
    return Error{source, fmt::format("the file name holds a control character (byte {:#04x} at offset {}) and the "
                                     "topology has no \"name\" to show instead: rename the file or give it a name",
                                     static_cast<unsigned char>(name_ex.value()[i]), i)};
  t.name = name_ex.value();
  if (root.has("notes")) {
    const Node n = root.at("notes");
    if (n.j.is_string()) {
      TRY_ASSIGN(note, text_of(n));
      t.notes = std::move(note);
    } else if (n.j.is_array()) {
      for (std::size_t k = 0; k < n.j.size(); ++k) {
        TRY_ASSIGN(note, text_of(n.at(k), "a string or an array of strings"));
        t.notes += (t.notes.empty() ? "" : "\n") + note;
      }
    } else
      return n.error("must be a string or an array of strings");
  }
  if (root.has("schema")) {
    const Node s = root.at("schema");
    if (!s.j.is_number_integer()) return s.error(fmt::format("must be an integer, got {}", s.j.dump()));
    if (s.j != 1) return s.error(fmt::format("unsupported schema version {} (expected 1)", s.j.dump()));
  }
  // What `charm calibrate` fitted and from what: kept with the values, not read.
  if (root.has("calibration") && !root.at("calibration").j.is_object())
    return root.at("calibration").error("must be an object");
  if (!root.has("gpu")) return root.missing("gpu");
  if (auto s = parse_stack(root, t.stack, t.sources); !s) return s.error();
  if (auto s = parse_gpu(root.at("gpu"), over, t); !s) return s.error();
  int num_gpus = 0;
  Status st = root.has("nodes") ? parse_generator(root, t, num_gpus) : parse_explicit(root, t, num_gpus);
  if (!st) return st.error();
  if (auto s = parse_routes(root, t, num_gpus); !s) return s.error();
  if (auto s = t.finalize(num_gpus, source); !s) return s.error();
  return t;
}

namespace {

Expected<nlohmann::json> parse_json_text(const std::string& text, const std::string& source) {
  return parse_json_strict(text, source);
}

}  // namespace

Expected<nlohmann::json::json_pointer> field_pointer(const std::string& path, std::string_view noun) {
  auto bad = [&](const std::string& why) {
    return Error{
        path, fmt::format("not a {} path ({}); write it like inter.bandwidth_gbps or links[3].latency_us", noun, why)};
  };
  if (path.empty()) return bad("empty");
  std::string ptr;
  std::size_t i = 0;
  while (i < path.size()) {
    std::size_t j = i;
    while (j < path.size() && (std::isalnum(static_cast<unsigned char>(path[j])) || path[j] == '_')) ++j;
    if (j == i) return bad(fmt::format("expected a field name at character {}", i + 1));
    ptr.append(1, '/').append(path, i, j - i);
    while (j < path.size() && path[j] == '[') {
      std::size_t k = j + 1;
      while (k < path.size() && std::isdigit(static_cast<unsigned char>(path[k]))) ++k;
      if (k == j + 1 || k >= path.size() || path[k] != ']')
        return bad(fmt::format("expected [index] at character {}", j + 1));
      ptr.append(1, '/').append(path, j + 1, k - j - 1);
      j = k + 1;
    }
    if (j < path.size()) {
      if (path[j] != '.' || j + 1 == path.size())
        return bad(fmt::format("unexpected '{}' at character {}", path[j], j + 1));
      ++j;
    }
    i = j;
  }
  return nlohmann::json::json_pointer(ptr);
}

Expected<Topology> parse_topology_text(const std::string& text, const std::string& source) {
  auto j = parse_json_text(text, source);
  if (!j) return j.error();
  return parse_topology(*j, source);
}

Expected<nlohmann::json> read_topology_json(const std::string& path) {
  auto text = read_input_file(path, "a topology file", "cannot open the topology file");
  if (!text) return text.error();
  return parse_json_text(*text, path);
}

Expected<Topology> load_topology(const std::string& path, const GpuOverrides& over) {
  auto j = read_topology_json(path);
  if (!j) return j.error();
  return parse_topology(*j, path, over);
}

namespace {

nlohmann::json stack_json(const StackSpec& st) {
  return {{"preset", st.preset},
          {"host_us", st.host_us},
          {"step_us", st.step_us},
          {"update_passes", st.update_passes},
          {"bwd_update_passes", st.bwd_update_passes},
          {"merge_traffic", st.merge_traffic},
          {"message_us", st.message_us},
          {"compute_slowdown", st.compute_slowdown},
          {"comm_slowdown", st.comm_slowdown},
          {"intra_flow_gbps", st.intra_flow_gbps},
          {"intra_injection_gbps", st.intra_injection_gbps}};
}

/// The kernel layer spelt out: a table's library and scales, or the flat efficiency.
void complete_kernel(nlohmann::json& g, const GpuSpec& spec) {
  if (spec.kernel) {
    if (g.contains("kernel") && g["kernel"].is_string()) g["kernel"] = {{"library", g["kernel"]}};
    if (!g["kernel"].contains("library")) g["kernel"]["library"] = spec.kernel->library;
    if (!g.contains("kernel_scale") || g["kernel_scale"].is_number())
      g["kernel_scale"] = {{"fwd", spec.kernel_scale_fwd}, {"bwd", spec.kernel_scale_bwd}};
    if (!g["kernel_scale"].contains("fwd")) g["kernel_scale"]["fwd"] = spec.kernel_scale_fwd;
    if (!g["kernel_scale"].contains("bwd")) g["kernel_scale"]["bwd"] = spec.kernel_scale_bwd;
    return;
  }
  if (!g.contains("efficiency")) g["efficiency"] = {{"fwd", spec.efficiency_fwd}, {"bwd", spec.efficiency_bwd}};
  if (g["efficiency"].is_number()) g["efficiency"] = {{"fwd", spec.efficiency_fwd}, {"bwd", spec.efficiency_bwd}};
  if (!g["efficiency"].contains("bwd")) g["efficiency"]["bwd"] = spec.efficiency_bwd;
}

void complete_gpu(nlohmann::json& g, const GpuSpec& spec) {
  complete_kernel(g, spec);
  for (const auto& [key, value] : {std::pair{"hbm_gbps", spec.hbm_gbps}, std::pair{"half_tokens", spec.half_tokens},
                                   std::pair{"launch_us", spec.launch_us}})
    if (!g.contains(key)) g[key] = value;
  if (!g.contains("sm_count")) g["sm_count"] = spec.sm_count;
  if (spec.sm_count == 0) return;
  for (const auto& [pass, tile] : {std::pair{"fwd", spec.tile_fwd}, std::pair{"bwd", spec.tile_bwd}}) {
    auto& k = g["kernel"][pass];
    if (!k.contains("tile_q")) k["tile_q"] = tile.q;
    if (!k.contains("tile_kv")) k["tile_kv"] = tile.kv;
  }
}

}  // namespace

Status complete_document(nlohmann::json& doc, const std::string& source) {
  auto t = parse_topology(doc, source);
  if (!t) return t.error();
  complete_gpu(doc["gpu"], t->gpu);
  doc["stack"] = stack_json(t->stack);
  // A generated node's GPU links: the first link of the file's form is GPU 0's.
  if (doc.contains("nodes") && doc.contains("intra") && !t->links.empty()) {
    auto& intra = doc["intra"];
    const Link& l = t->links.front();
    if (!intra.contains("per_flow_gbps")) intra["per_flow_gbps"] = l.per_flow_gbps;
    if (!intra.contains("injection_gbps")) intra["injection_gbps"] = l.injection_gbps;
  }
  return {};
}

Status set_number(nlohmann::json& doc, const std::string& path, double value, const std::string& source) {
  auto ptr = field_pointer(path);
  if (!ptr) return ptr.error();
  // The calibration block records a fit and is never read: a number set there would change nothing.
  if (path.substr(0, path.find_first_of(".[")) == "calibration")
    return Error{path, "is in the calibration record, which the simulator does not read"};
  if (!doc.contains(*ptr)) return Error{path, fmt::format("no such field in {}", source)};
  nlohmann::json& v = doc.at(*ptr);
  if (v.is_object()) {
    std::string keys;
    for (const auto& item : v.items())
      if (item.value().is_number()) keys += fmt::format("{}{}.{}", keys.empty() ? "" : ", ", path, item.key());
    return Error{path, fmt::format("is an object in {}; set one of its numbers{}", source,
                                   keys.empty() ? "" : " (" + keys + ")")};
  }
  if (!v.is_number()) return Error{path, fmt::format("is not a number in {} (it is {})", source, v.dump())};
  constexpr double kExactInts = 9007199254740992.0;  // 2^53: every whole double below is an exact int64
  if (std::trunc(value) == value && std::abs(value) < kExactInts)
    v = static_cast<std::int64_t>(value);
  else
    v = value;
  return {};
}

nlohmann::json model_sources_json(const ModelSources& m) {
  return {{"kernel", m.kernel}, {"stack", m.stack}, {"links", m.links}, {"assumed", m.assumed}};
}

nlohmann::json topology_summary(const Topology& t) {
  nlohmann::json links = nlohmann::json::array();
  for (const auto& l : t.links)
    links.push_back({{"a", t.vertex_names[std::size_t(l.a)]},
                     {"b", t.vertex_names[std::size_t(l.b)]},
                     {"bandwidth_gbps", l.bandwidth_gbps},
                     {"latency_us", l.latency_us},
                     {"per_flow_gbps", l.per_flow_gbps},
                     {"injection_gbps", l.injection_gbps},
                     {"sharing", l.sharing == Sharing::Shared ? "shared" : "dedicated"},
                     {"kind", std::string(to_string(l.kind))}});
  return {{"name", t.name},
          {"gpus", t.num_gpus()},
          {"switches", t.num_vertices() - t.num_gpus()},
          {"domains", t.domains()},
          {"gpu",
           {{"model", t.gpu.model},
            {"tflops_bf16", t.gpu.tflops_bf16},
            {"hbm_gbps", t.gpu.hbm_gbps},
            {"efficiency_fwd", t.gpu.efficiency_fwd},
            {"efficiency_bwd", t.gpu.efficiency_bwd},
            {"launch_us", t.gpu.launch_us},
            {"memory_gb", t.gpu.memory_gb},
            {"sm_count", t.gpu.sm_count},
            {"tile_fwd", {t.gpu.tile_fwd.q, t.gpu.tile_fwd.kv}},
            {"tile_bwd", {t.gpu.tile_bwd.q, t.gpu.tile_bwd.kv}},
            {"kernel", t.gpu.kernel ? nlohmann::json(t.gpu.kernel->library) : nlohmann::json(nullptr)},
            {"family", t.gpu.family}}},
          {"stack", stack_json(t.stack)},
          {"model", model_sources_json(t.sources)},
          {"links", links},
          {"notes", t.notes}};
}

}  // namespace charm::topo
