// libFuzzer target: arbitrary bytes as a topology file -> loader -> routes and summary
// -> a simulation of ring and charm on the cluster it describes.
// Nothing may crash, hang or trip a sanitizer; bad input must come back as an Error;
// every number a topology may hold (bandwidths and latencies at the edges of their
// plausible ranges) must give a finite, non-negative simulated time.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "scheduler/planners/planners.hpp"
#include "sim/simulator.hpp"
#include "topologies/topology_json.hpp"

namespace {

/// Routing searches from every GPU of an explicit file (once per link kind); keep one input cheap (the loader's own
/// caps are 4096 GPUs for an explicit file, 65536 for a generated one).
bool too_big(const nlohmann::json& j) {
  if (!j.is_object()) return false;
  auto count = [&](const char* key) -> std::int64_t {
    if (!j.contains(key)) return 1;
    const auto& v = j[key];
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_array()) return static_cast<std::int64_t>(v.size());
    return 1;
  };
  const std::int64_t nodes = count("nodes"), per = count("gpus_per_node"), gpus = count("gpus");
  return nodes > 64 || per > 64 || nodes * per > 256 || gpus > 256;
}

/// Ring and charm (over the topology's domains) forward on a small workload; the
/// simulator either refuses with an Error or answers a finite time.
void simulate_on(const charm::topo::Topology& t) {
  const int n = t.num_gpus();
  if (n < 2 || n > 16) return;  // a few hundred ops: cheap per input
  charm::ir::Workload w;
  w.seq = 64 * n;
  w.heads = w.kv_heads = 1;
  w.head_dim = 16;
  const auto model = charm::sim::ComputeModel::from_gpu(t.gpu, w.dtype);
  for (const char* algo : {"ring", "charm"}) {
    charm::sched::PlanRequest req{algo, w, n, 1};
    if (std::string(algo) == "charm") req.domains = t.domains();
    auto plan = charm::sched::make_plan(req);
    if (!plan) continue;  // e.g. charm on a domain count it cannot split
    auto r = charm::sim::simulate(*plan, t, model);
    if (!r) continue;
    if (!std::isfinite(r->makespan_s) || r->makespan_s < 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && too_big(j)) return 0;
  auto t = charm::topo::parse_topology_text(text, "fuzz.json");
  if (!t) {
    (void)t.error().message();
    return 0;
  }
  (void)t->domains();
  const int n = t->num_gpus();
  for (int s = 0; s < n && s < 8; ++s)
    for (int d = 0; d < n && d < 8; ++d)
      if (s != d) {
        (void)t->route_bandwidth_gbps(s, d);
        (void)t->route_latency_us(s, d);
        for (auto ch : t->route(s, d)) (void)t->channel_name(ch);
      }
  (void)charm::topo::topology_summary(*t).dump();
  simulate_on(*t);
  return 0;
}
