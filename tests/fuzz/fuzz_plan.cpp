// libFuzzer target: arbitrary bytes as a plan file -> loader -> validator.
// Nothing may crash, hang or trip a sanitizer; bad input must come back as an Error.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>

#include "scheduler/ir/plan_io.hpp"
#include "scheduler/validate/validator.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto plan = charm::ir::plan_from_json(j, "fuzz");
  if (!plan) return 0;
  // Keep single inputs cheap: the validator is linear in ops and ranks.
  if (plan->ranks > 4096) return 0;
  auto rep = charm::sched::validate(*plan);
  (void)rep.summary(*plan);
  return 0;
}
