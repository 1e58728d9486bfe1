#pragma once
// Measured beside predicted: two Chrome traces of one plan (charm simulate --trace
// and charm run --trace write the same op ids and names) aligned op by op, to see
// which ops, and which kinds of op, the model gets wrong and by how much. The
// calibration work reads this to find the cost the model is missing.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "support/expected.hpp"

namespace charm::trace {

struct OpDiff {
  int op = 0;
  std::string name, kind;  // the slice's name and category (Compute, Send, Recv, Merge, ...)
  int rank = 0;
  double predicted_ms = 0, measured_ms = 0;
};

struct KindDiff {
  std::string kind;
  int ops = 0;
  double predicted_ms = 0, measured_ms = 0;  // summed durations
};

struct TraceDiff {
  double predicted_makespan_ms = 0, measured_makespan_ms = 0;
  std::vector<KindDiff> kinds;  // by summed |measured - predicted|, largest first
  std::vector<OpDiff> ops;      // every op, by |measured - predicted|, largest first
};

/// Errors name `predicted_name` or `measured_name`: not a Chrome trace of charm's
/// schema, or traces of different plans (an op id with another name, or missing).
[[nodiscard]] Expected<TraceDiff> diff_traces(const nlohmann::json& predicted, const nlohmann::json& measured,
                                              const std::string& predicted_name, const std::string& measured_name);

}  // namespace charm::trace
