#pragma once
// Comparing a run against the fp64 reference.
//
// Per tensor: max_abs = max |run - ref|; scale = max(max |ref|, 1); max_rel = max_abs / scale,
// i.e. the error relative to the tensor's largest reference magnitude. An
// element-wise ratio would be dominated by entries that happen to be near zero
// (gradients cancel), which says nothing about the plan. Where the whole tensor
// is small or vanishes (dQ is exactly 0 when a query sees only itself), the error
// is absolute, on the scale of the inputs (standard normal, so 1): fp32 rounding
// of the terms that cancel leaves about 1e-7 there, and a ratio to 0 would fail a
// correct run. LSE entries that are -inf in both count as equal; -inf in one only
// is an infinite error. A run passes when every tensor it produced has
// max_rel <= tolerance(dtype).

#include <optional>
#include <string>

#include "runtime/global_tensors.hpp"
#include "runtime/reference.hpp"

namespace charm::rt {

struct TensorError {
  double max_abs = 0;  // max |run - ref|
  double scale = 1;    // max(max |ref|, 1): what max_abs is measured against
  double max_rel = 0;  // max_abs / scale, the figure compared with the tolerance
};

struct CheckReport {
  std::optional<TensorError> out, lse, dq, dk, dv;  // empty: not produced by this pass
  double tolerance = 0;
  [[nodiscard]] bool ok() const;
  /// The first tensor over tolerance, or "" when ok.
  [[nodiscard]] std::string worst() const;
};

/// fp32: 1e-5. bf16 / fp16 runs store what a GPU stores in the dtype: the inputs, every
/// partial O that crosses a link, and the results (O, dQ, dK, dV); arithmetic and the
/// accumulators stay fp32, as on a GPU. One rounding costs at most 2^-9 (bf16, 8-bit
/// mantissa) or 2^-12 (fp16) of the tensor's largest value, and max_rel is measured
/// against that value, so a result rounded once and built from partials rounded once
/// each stays within a few roundings: 1e-2 (about 5 x 2^-9) and 2e-3 (about 8 x 2^-12).
/// Measured on 8 ranks, fwd+bwd, causal: bf16 1.4e-3 to 2.9e-3, fp16 2.3e-4.
[[nodiscard]] double tolerance(ir::DType t);

[[nodiscard]] TensorError compare(const std::vector<float>& run, const std::vector<double>& ref);

/// Compares whichever of out, lse, dq, dk, dv `run` holds (non-empty) with `ref`.
[[nodiscard]] CheckReport check_against(const GlobalTensors& run, const Reference& ref, ir::DType dtype);

}  // namespace charm::rt
