#pragma once
// Comparing a run against the fp64 reference.
//
// Per tensor: max_abs = max |run - ref|; max_rel = max_abs / max(max |ref|, 1e-30),
// i.e. the error relative to the tensor's largest reference magnitude. An
// element-wise ratio would be dominated by entries that happen to be near zero
// (gradients cancel), which says nothing about the plan. LSE entries that are
// -inf in both count as equal; -inf in one only is an infinite error.
// A run passes when every tensor it produced has max_rel <= tolerance(dtype).

#include <optional>
#include <string>

#include "runtime/global_tensors.hpp"
#include "runtime/reference.hpp"

namespace charm::rt {

struct TensorError {
  double max_abs = 0, max_rel = 0;
};

struct CheckReport {
  std::optional<TensorError> out, lse, dq, dk, dv;  // empty: not produced by this pass
  double tolerance = 0;
  [[nodiscard]] bool ok() const;
  /// The first tensor over tolerance, or "" when ok.
  [[nodiscard]] std::string worst() const;
};

/// fp32: 1e-5. bf16 / fp16 inputs are rounded to the dtype before anything runs, so
/// the CPU arithmetic is still fp32; the looser bounds (1e-2, 2e-3) are those a
/// GPU run computing in the dtype is held to.
[[nodiscard]] double tolerance(ir::DType t);

[[nodiscard]] TensorError compare(const std::vector<float>& run, const std::vector<double>& ref);

/// Compares whichever of out, lse, dq, dk, dv `run` holds (non-empty) with `ref`.
[[nodiscard]] CheckReport check_against(const GlobalTensors& run, const Reference& ref, ir::DType dtype);

} // namespace charm::rt
