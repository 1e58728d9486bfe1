// libFuzzer target: arbitrary bytes as a plan file -> loader -> validator -> simulator.
// Nothing may crash, hang or trip a sanitizer; bad input must come back as an Error.
// A plan that validates is simulated on a uniform cluster whose numbers come from
// the input's first bytes, spread over the whole plausible range on a log scale
// (its edges included): the time must come out finite and non-negative.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/validate/validator.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology.hpp"

namespace {

/// byte 0 -> lo, 255 -> hi, log-uniform between.
double log_pick(std::uint8_t b, double lo, double hi) { return b == 255 ? hi : lo * std::pow(hi / lo, b / 255.0); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto plan = charm::ir::plan_from_json(j, "fuzz");
  if (!plan) return 0;
  // Keep single inputs cheap: the validator is linear in ops and ranks.
  if (plan->ranks > 4096) return 0;
  auto rep = charm::sched::validate(*plan);
  (void)rep.summary(*plan);
  if (!rep.ok() || plan->ranks > 64 || plan->size() > 20000) return 0;
  namespace topo = charm::topo;
  const std::uint8_t b0 = size > 0 ? data[0] : 0, b1 = size > 1 ? data[1] : 0, b2 = size > 2 ? data[2] : 0,
                     b3 = size > 3 ? data[3] : 0;
  const double bw = log_pick(b0, topo::kMinGbps, topo::kMaxGbps);
  const double tflops = log_pick(b1, topo::kMinTflops, topo::kMaxTflops);
  const double latency = b2 < 16 ? 0.0 : log_pick(b2, 1e-6, topo::kMaxLatencyUs);
  const double hbm = b3 < 16 ? 0.0 : log_pick(b3, topo::kMinGbps, topo::kMaxGbps);
  const auto t = topo::make_uniform(plan->ranks, bw, tflops, latency, hbm);
  const auto model = charm::sim::ComputeModel::from_gpu(t.gpu, plan->workload.dtype);
  auto r = charm::sim::simulate(*plan, t, model);
  if (r && (!std::isfinite(r->makespan_s) || r->makespan_s < 0)) std::abort();
  return 0;
}
