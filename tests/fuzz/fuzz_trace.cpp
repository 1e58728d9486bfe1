// libFuzzer target: the trace reader of charm trace-diff. The input is parsed as charm parses a
// trace file (strict JSON) and diffed against itself and against a fixed two-rank ring trace.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "scheduler/trace/diff.hpp"
#include "support/json_text.hpp"

namespace {
const nlohmann::json& reference() {
  static const nlohmann::json j = nlohmann::json::parse(R"({"traceEvents":[
    {"name":"process_name","ph":"M","pid":0,"args":{"name":"rank 0"}},
    {"name":"send kv0 -> 1","cat":"Send","ph":"X","ts":0,"dur":5,"pid":0,"tid":1,"args":{"op":0}},
    {"name":"fwd q0 kv0","cat":"Compute","ph":"X","ts":0,"dur":10,"pid":0,"tid":0,"args":{"op":1}},
    {"name":"recv kv1 <- 1","cat":"Recv","ph":"X","ts":0,"dur":5,"pid":0,"tid":1,"args":{"op":2}}]})");
  return j;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto j = charm::parse_json_strict(text, "fuzz.json");
  if (!j) return 0;
  (void)charm::trace::diff_traces(*j, *j, "a.json", "b.json").ok();
  (void)charm::trace::diff_traces(reference(), *j, "ref.json", "fuzz.json").ok();
  (void)charm::trace::diff_traces(*j, reference(), "fuzz.json", "ref.json").ok();
  return 0;
}
