#pragma once
// `charm sweep` from its parsed lists to a sim::SweepSpec, shared by the command and the Python
// module: the topologies and their --set hardware points, the workload lists, the algorithms and
// passes, and the memory check every configuration passes before anything runs. Errors are values,
// the user's (ErrorKind::Input), named by the flag.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/planners/estimate.hpp"
#include "sim/sweep.hpp"
#include "support/expected.hpp"

namespace charm::app {

/// A list holds at most this many values (--batch, ..., each --set), and the sets make at most this many
/// hardware points per topology.
inline constexpr std::size_t kMaxListValues = 4096;
/// A sweep runs at most this many configurations.
inline constexpr std::size_t kMaxConfigs = 2'000'000;

/// One --set: a documented number of the topology JSON and the values it takes.
struct SetField {
  std::string field;           // dotted path, e.g. inter.bandwidth_gbps
  std::vector<double> values;  // distinct, in the order given
};

/// A workload list: "1,2,4", "4k..128k*2" (geometric), "64..256+64" (arithmetic), "1..8" (step 1). The
/// values are sizes (128k), >= 1, kept once each, at most kMaxListValues of them.
[[nodiscard]] Expected<std::vector<std::int64_t>> parse_list(const std::string& text, const std::string& flag);
/// One --set: "inter.bandwidth_gbps=25,50,100", ranges as in the other lists but of any numbers:
/// "gpu.tflops.bf16=100..800*2" (geometric), "inter.latency_us=0..10+2.5" (arithmetic).
/// No value is judged here: the topology's own checks do that once it is edited.
[[nodiscard]] Expected<SetField> parse_set(const std::string& text);
/// Every --set, no field set twice; `points` is the hardware points per topology they make, at most
/// kMaxListValues.
[[nodiscard]] Expected<std::vector<SetField>> parse_sets(const std::vector<std::string>& texts, std::size_t& points);

/// A topology the sweep reads: its name in messages (the file, or "topology[i]") and its document.
struct SweepTopology {
  std::string name;
  nlohmann::json doc;
};

/// The workload lists and choices, as the front end parsed them (sizes are >= 1, distinct).
struct SweepLists {
  std::vector<std::int64_t> batch, seq, heads, head_dim, kv_heads;  // kv_heads empty: = heads
  std::vector<std::string> dtypes, layouts;
  bool causal = false;
  std::string algos;  // comma-separated (empty: every algorithm)
  std::string pass = "fwd";
  double reserved_gb = 0;
  std::vector<std::int64_t> tp, cp, domains;  // parallel axes (empty: not swept)
};

/// A spec's topologies: every one (or each one's --set points, the first set varying slowest). Each
/// topology must be valid as given, and each point as edited; what the loader warns of is in spec.warnings.
[[nodiscard]] Expected<sim::SweepSpec> sweep_topologies(const std::vector<SweepTopology>& topologies,
                                                        const std::vector<SetField>& sets);
/// The rest of the spec: the workload lists, the algorithms and the passes.
[[nodiscard]] Status set_sweep_lists(sim::SweepSpec& spec, const SweepLists& lists);

/// Refuses, before any simulation, a sweep of more than kMaxConfigs configurations, or with a
/// configuration whose simulation would not fit: the estimate of charm simulate, for every (configuration, algorithm,
/// pass) the planner accepts, each (topology, algorithm, pass, layout, mask) once. The error names the topology (by
/// `names`) or the
/// --set values.
[[nodiscard]] Status check_sweep_fits(const sim::SweepSpec& spec, const std::vector<std::string>& names,
                                      const sched::MemoryBudget& budget);

}  // namespace charm::app
