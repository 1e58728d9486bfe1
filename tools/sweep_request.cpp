#include "tools/sweep_request.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/simulator.hpp"
#include "tools/cli_common.hpp"
#include "topologies/topology_json.hpp"

namespace charm::cli {

namespace {

/// Adds one topology per point of the sets' cross product (the first --set varies slowest): the
/// file's JSON with those numbers replaced, then parsed, so the topology's own checks judge every value.
void add_set_points(sim::SweepSpec& spec, const nlohmann::json& doc, const std::string& file, std::size_t file_index,
                    const std::vector<SetFlag>& sets) {
  std::size_t points = 1;
  for (const auto& set : sets) points *= set.values.size();
  for (std::size_t i = 0; i < points; ++i) {
    sim::SweepSpec::Point point{file_index, std::vector<double>(sets.size())};
    for (std::size_t k = sets.size(), rest = i; k-- > 0; rest /= sets[k].values.size())
      point.values[k] = sets[k].values[rest % sets[k].values.size()];
    nlohmann::json edited = doc;
    std::vector<std::string> assigned;
    for (std::size_t k = 0; k < sets.size(); ++k) {
      if (auto st = topo::set_number(edited, sets[k].field, point.values[k], file); !st)
        fail(Error{"--set", st.error().message()});
      assigned.push_back(fmt::format("{}={}", sets[k].field, point.values[k]));
    }
    auto t = topo::parse_topology(edited, file);
    if (!t) fail(Error{"--set", fmt::format("{}: {}", fmt::join(assigned, ", "), t.error().message())});
    spec.topologies.push_back(std::move(t).value());
    spec.points.push_back(std::move(point));
  }
}

void add_topologies(sim::SweepSpec& spec, const std::vector<SweepTopology>& topologies,
                    const std::vector<SetFlag>& sets) {
  if (topologies.empty()) fail(Error{"--topology", "expected one or more topology files"});
  for (const auto& s : sets) spec.set_fields.push_back(s.field);
  for (std::size_t i = 0; i < topologies.size(); ++i) {
    // The file as given must be valid too: its own faults are --topology's, not a --set value's.
    const auto& [name, doc] = topologies[i];
    auto t = topo::parse_topology(doc, name);
    if (!t) fail(Error{"--topology", t.error().message()});
    if (sets.empty()) {
      spec.topologies.push_back(std::move(t).value());
      continue;
    }
    // Every documented field can be set, spelt out in the file or not (its default is the base).
    nlohmann::json complete = doc;
    if (auto st = topo::complete_document(complete, name); !st) fail(Error{"--topology", st.error().message()});
    add_set_points(spec, complete, name, i, sets);
  }
}

template <class T, class Parse>
std::vector<T> distinct(const std::vector<std::string>& items, Parse parse, const char* flag, const char* expected) {
  std::vector<T> out;
  for (const auto& item : items) {
    auto v = parse(item);
    if (!v) fail(Error{flag, v.error().what});
    if (std::find(out.begin(), out.end(), *v) == out.end()) out.push_back(*v);
  }
  if (out.empty()) fail(Error{flag, expected});
  return out;
}

/// Where topology `t` of the sweep came from, for a message: its name, and its --set values.
Error config_error(const sim::SweepSpec& spec, std::size_t t, const std::vector<std::string>& names,
                   const std::string& what) {
  if (spec.set_fields.empty()) return Error{"--topology", fmt::format("{}: {}", names[t], what)};
  std::vector<std::string> assigned;
  for (std::size_t k = 0; k < spec.set_fields.size(); ++k)
    assigned.push_back(fmt::format("{}={}", spec.set_fields[k], spec.points[t].values[k]));
  return Error{"--set", fmt::format("{}: {}", fmt::join(assigned, ", "), what)};
}

}  // namespace

sim::SweepSpec sweep_topologies(const std::vector<SweepTopology>& topologies, const std::vector<SetFlag>& sets) {
  sim::SweepSpec spec;
  add_topologies(spec, topologies, sets);
  return spec;
}

void set_sweep_lists(sim::SweepSpec& spec, const SweepLists& lists) {
  spec.batch = lists.batch;
  spec.seq = lists.seq;
  spec.heads = lists.heads;
  spec.head_dim = lists.head_dim;
  spec.kv_heads = lists.kv_heads;
  spec.dtypes = distinct<ir::DType>(
      lists.dtypes, [](const std::string& s) { return ir::parse_dtype(s); }, "--dtype", "expected bf16, fp16 or fp32");
  spec.layouts = distinct<ir::Layout>(
      lists.layouts, [](const std::string& s) { return ir::parse_layout(s); }, "--layout",
      "expected contiguous or zigzag");
  spec.causal = {lists.causal};
  spec.algos = lists.algos.empty() ? sched::algorithm_names() : algorithm_list(lists.algos);
  if (!(lists.reserved_gb >= 0) || !std::isfinite(lists.reserved_gb) || lists.reserved_gb > 1e4)
    fail(Error{"--reserved-gb", fmt::format("must be a number of GB in [0, 10000], got {}", lists.reserved_gb)});
  spec.reserved_gb = lists.reserved_gb;
  if (lists.pass == "fwd")
    spec.passes = {ir::Phase::Fwd};
  else if (lists.pass == "bwd")
    spec.passes = {ir::Phase::Bwd};
  else if (lists.pass == "both")
    spec.passes = {ir::Phase::Fwd, ir::Phase::Bwd};
  else
    fail(Error{"--pass", fmt::format("expected fwd, bwd or both, got '{}'", lists.pass)});
}

void check_sweep_memory(const sim::SweepSpec& spec, const std::vector<std::string>& names) {
  std::set<std::tuple<std::size_t, std::string, int, int, bool>> fit;
  std::vector<std::string> algos = spec.algos;
  algos.push_back("ring");  // the baseline runs whether listed or not
  for (std::size_t i = 0; i < spec.num_configs(); ++i) {
    const sim::SweepConfig c = sim::sweep_config(spec, i);
    const topo::Topology& t = spec.topologies[c.topology];
    for (const ir::Phase phase : spec.passes)
      for (const auto& algo : algos) {
        ir::Workload w = c.workload;
        w.pass = phase == ir::Phase::Fwd ? ir::PassKind::Fwd : ir::PassKind::Bwd;
        const auto req = sim::normalised_request({algo, w, t.num_gpus(), sim::default_domains(t)});
        const auto key = std::tuple{c.topology, req.algo, int(w.pass), int(req.workload.layout), w.causal};
        if (fit.count(key) > 0 || !sched::check_request(req)) continue;
        try {
          check_plan_budget(req, sched::kSimBytesPerOp, "the simulation", sim::simulation_symmetry(req, t));
        } catch (const UsageError& e) {
          fail(config_error(spec, c.topology, names, e.error.what));
        }
        fit.insert(key);
      }
  }
}

}  // namespace charm::cli
