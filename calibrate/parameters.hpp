#pragma once
// The parameters `charm calibrate` may change: numbers of the topology JSON document,
// addressed by their path in it ("inter.bandwidth_gbps", "gpu.efficiency.fwd",
// "links[3].latency_us"). Fitting edits the document and parses it again, so a field the
// schema gains later is fittable with no change here; the registry below only gives the
// known fields physical bounds.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "support/expected.hpp"

namespace charm::calib {

/// Log: a positive quantity fitted as log(value) (bandwidths, efficiencies: a relative step
/// means the same everywhere). Linear: one whose range starts at 0 (latencies, overheads).
enum class Scale : std::uint8_t { Log, Linear };

struct Bounds {
  double lo = 0, hi = 0;
  Scale scale = Scale::Log;
  std::string rule;   // why these bounds, for the report ("bandwidth: [base/20, base]")
  bool known = true;  // false: the field is not in the registry (generic bounds, with a note)
};

/// The parameters fitted when --fit is not given, in one place: those of this list that the
/// base document has (and that no --nccl-tests log fixes, and that a row's pass can move).
[[nodiscard]] const std::vector<std::string>& default_fit_parameters();

/// A parameter of how a metric was measured, not of the cluster ("measurement.comm_offset_ms": what the
/// profiled T_comm of a run holds beyond the run's own communication time). Fitted like the others from a
/// base of 0, added to the rows of its metric, never written into the topology.
[[nodiscard]] bool is_measurement_parameter(const std::string& path);
/// The measurement parameter fitted by default when rows of the comm metric are given.
inline constexpr const char* kCommOffsetParameter = "measurement.comm_offset_ms";

/// "gpu.efficiency.fwd" -> "/gpu/efficiency/fwd", "links[3].latency_us" -> "/links/3/latency_us".
[[nodiscard]] Expected<nlohmann::json::json_pointer> parameter_pointer(const std::string& path);

/// The number at `path` in `doc`; errors say why it cannot be fitted. `source` names the document.
[[nodiscard]] Expected<double> parameter_value(const nlohmann::json& doc, const std::string& path,
                                               const std::string& source);
/// Writes `value` at `path` (which parameter_value accepted).
void set_parameter(nlohmann::json& doc, const std::string& path, double value);

/// Physical bounds of the field at `path` with value `base` in the base document.
[[nodiscard]] Expected<Bounds> bounds_for(const std::string& path, double base);

}  // namespace charm::calib
