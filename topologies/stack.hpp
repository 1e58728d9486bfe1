#pragma once
// StackSpec: what the software around the kernels costs on given hardware.
//
// The hardware layer (links, datasheet rates) says what the wires carry; the
// stack says what a framework and its collective library attain on them. Its cost
// fields are listed in stack_fields.def, one line each with what it means.
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

#include "support/expected.hpp"

namespace charm::topo {

/// What kind of quantity a stack field is: how a topology file's value is read and checked, and the
/// bounds calibrate fits it within.
enum class StackQuantity {
  Cost,         // us of host or framework time, >= 0 (calibrate: [0, 1000])
  Passes,       // fused passes over fp32 results, [0, 100] (calibrate: [0, 20])
  FusedPasses,  // HBM traffic in fused passes, [0.1, 100] (calibrate: [0.5, 20])
  Slowdown,     // a fraction longer, [0, 10] (calibrate: [0, 2])
  Bandwidth,    // GB/s, 0: no limit (calibrate: [base/20, base])
};

struct StackSpec {
  std::string preset = "none";
#define CHARM_STACK_FIELD(name, value, quantity, meaning) double name = value;
#include "topologies/stack_fields.def"
#undef CHARM_STACK_FIELD
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

/// One cost field of the stack, from stack_fields.def.
struct StackField {
  std::string_view name;  // the member's and the JSON key's
  double StackSpec::*member;
  StackQuantity quantity;
  double default_value;      // where a preset sets none
  std::string_view meaning;  // one sentence or two, as docs/topology.md's field table has it
};
inline constexpr StackField kStackFields[] = {
#define CHARM_STACK_FIELD(name, value, quantity, meaning)                                                              \
  {#name, &StackSpec::name, StackQuantity::quantity, value, meaning},
#include "topologies/stack_fields.def"
#undef CHARM_STACK_FIELD
};

}  // namespace charm::topo
