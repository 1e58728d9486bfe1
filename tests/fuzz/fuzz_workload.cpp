// libFuzzer target: size strings, workload JSON and plan requests built from fuzz bytes.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/planners/planners.hpp"
#include "tools/cli_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)charm::parse_size(text, "--seq");
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return 0;
  auto w = charm::ir::workload_from_json(j.contains("workload") ? j["workload"] : j, "fuzz");
  if (!w) return 0;
  charm::sched::PlanRequest req;
  req.workload = *w;
  if (j.contains("algo") && j["algo"].is_string())
    req.algo = j["algo"].get<std::string>();
  else
    req.algo = "ring";
  if (j.contains("ranks") && j["ranks"].is_number_integer())
    req.ranks = static_cast<int>(j["ranks"].get<std::int64_t>() % 65);
  if (j.contains("domains") && j["domains"].is_number_integer())
    req.domains = static_cast<int>(j["domains"].get<std::int64_t>() % 9);
  // Planning is quadratic in ranks; the request is bounded above so one input stays fast.
  auto plan = charm::sched::make_plan(req);
  (void)plan.ok();
  return 0;
}
