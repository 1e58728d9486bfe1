#pragma once
// Serialisations of a plan: JSON (round-trips), Graphviz DOT, per-rank text listing.

#include <iosfwd>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "scheduler/ir/plan.hpp"

namespace charm::ir {

inline constexpr int kPlanSchema = 1;

[[nodiscard]] nlohmann::json workload_to_json(const Workload& w);
[[nodiscard]] Expected<Workload> workload_from_json(const nlohmann::json& j, std::string_view where);

[[nodiscard]] nlohmann::json plan_to_json(const Plan& plan);
/// Parses a plan; errors name the JSON path, e.g. "plan.json: ops[12].peer: must be an integer".
[[nodiscard]] Expected<Plan> plan_from_json(const nlohmann::json& j, std::string_view where);
[[nodiscard]] Expected<Plan> load_plan(const std::string& path);

void write_dot(const Plan& plan, std::ostream& os);
void write_listing(const Plan& plan, std::ostream& os, int only_rank = -1);

}  // namespace charm::ir
