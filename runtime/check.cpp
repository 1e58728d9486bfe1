#include "runtime/check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace charm::rt {
namespace {

/// The inputs are standard normal (make_inputs): a tensor whose reference is smaller than
/// this is judged by its absolute error.
constexpr double kInputScale = 1.0;

}  // namespace

double tolerance(ir::DType t) {
  switch (t) {
  case ir::DType::FP32:
    return 1e-5;
  case ir::DType::FP16:
    return 2e-3;
  case ir::DType::BF16:
    return 1e-2;
  }
  return 1e-5;
}

TensorError compare(const std::vector<float>& run, const std::vector<double>& ref) {
  TensorError e;
  if (run.size() != ref.size()) {
    e.max_abs = e.max_rel = std::numeric_limits<double>::infinity();
    return e;
  }
  double mag = 0;
  for (std::size_t i = 0; i < run.size(); ++i) {
    const double a = run[i], b = ref[i];
    if (std::isfinite(b)) mag = std::max(mag, std::fabs(b));
    double d;
    if (a == b)
      d = 0;  // includes -inf == -inf
    else if (std::isnan(a) || !std::isfinite(a) || !std::isfinite(b))
      d = std::numeric_limits<double>::infinity();
    else
      d = std::fabs(a - b);
    e.max_abs = std::max(e.max_abs, d);
  }
  e.scale = std::max(mag, kInputScale);
  e.max_rel = e.max_abs / e.scale;
  return e;
}

CheckReport check_against(const GlobalTensors& run, const Reference& ref, ir::DType dtype) {
  CheckReport r;
  r.tolerance = tolerance(dtype);
  if (!run.out.empty()) r.out = compare(run.out, ref.out);
  if (!run.lse.empty()) r.lse = compare(run.lse, ref.lse);
  if (!run.dq.empty()) r.dq = compare(run.dq, ref.dq);
  if (!run.dk.empty()) r.dk = compare(run.dk, ref.dk);
  if (!run.dv.empty()) r.dv = compare(run.dv, ref.dv);
  return r;
}

std::string CheckReport::worst() const {
  const std::pair<const char*, const std::optional<TensorError>*> all[] = {
      {"out", &out}, {"lse", &lse}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}};
  for (const auto& [name, e] : all)
    if (e->has_value() && !((*e)->max_rel <= tolerance)) return name;
  return "";
}

bool CheckReport::ok() const { return worst().empty(); }

}  // namespace charm::rt
