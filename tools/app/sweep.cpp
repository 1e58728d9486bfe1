#include "tools/app/sweep.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "scheduler/planners/algorithms.hpp"
#include "scheduler/planners/planners.hpp"
#include "sim/evaluate.hpp"
#include "sim/simulator.hpp"
#include "support/number_text.hpp"
#include "topologies/topology_json.hpp"

namespace charm::app {

namespace {

/// Adds one topology per point of the sets' cross product (the first --set varies slowest): the
/// file's JSON with those numbers replaced, then parsed, so the topology's own checks judge every value.
/// A loader's warning, kept once for the whole sweep (many --set points share one).
void add_warning(sim::SweepSpec& spec, std::string w) {
  if (std::find(spec.warnings.begin(), spec.warnings.end(), w) == spec.warnings.end()) spec.warnings.push_back(w);
}

Status add_set_points(sim::SweepSpec& spec, const nlohmann::json& doc, const std::string& file, std::size_t file_index,
                      const std::vector<SetField>& sets) {
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
        return Error{"--set", st.error().message()};
      assigned.push_back(fmt::format("{}={}", sets[k].field, point.values[k]));
    }
    auto t = topo::parse_topology(edited, file);
    if (!t) return Error{"--set", fmt::format("{}: {}", fmt::join(assigned, ", "), t.error().message())};
    for (const auto& w : t->warnings) add_warning(spec, fmt::format("--set {}: {}", fmt::join(assigned, ", "), w));
    spec.topologies.push_back(std::move(t).value());
    spec.points.push_back(std::move(point));
  }
  return {};
}

Status add_topologies(sim::SweepSpec& spec, const std::vector<SweepTopology>& topologies,
                      const std::vector<SetField>& sets) {
  if (topologies.empty()) return Error{"--topology", "expected one or more topology files"};
  for (const auto& s : sets) spec.set_fields.push_back(s.field);
  for (std::size_t i = 0; i < topologies.size(); ++i) {
    // The file as given must be valid too: its own faults are --topology's, not a --set value's.
    const auto& [name, doc] = topologies[i];
    auto t = topo::parse_topology(doc, name);
    if (!t) return Error{"--topology", t.error().message()};
    for (const auto& w : t->warnings) add_warning(spec, w);
    if (sets.empty()) {
      spec.topologies.push_back(std::move(t).value());
      continue;
    }
    // Every documented field can be set, spelt out in the file or not (its default is the base).
    nlohmann::json complete = doc;
    if (auto st = topo::complete_document(complete, name); !st) return Error{"--topology", st.error().message()};
    if (auto st = add_set_points(spec, complete, name, i, sets); !st) return st;
  }
  return {};
}

template <class T, class Parse>
Expected<std::vector<T>> distinct(const std::vector<std::string>& items, Parse parse, const char* flag,
                                  const char* expected) {
  std::vector<T> out;
  for (const auto& item : items) {
    auto v = parse(item);
    if (!v) return Error{flag, v.error().what};
    if (std::find(out.begin(), out.end(), *v) == out.end()) out.push_back(*v);
  }
  if (out.empty()) return Error{flag, expected};
  return out;
}

/// Layout sizes and domains, each within what a topology can hold.
Expected<std::vector<int>> gpu_counts(const std::vector<std::int64_t>& v, const char* flag) {
  std::vector<int> out;
  for (const auto x : v) {
    if (x > 1 << 20) return Error{flag, fmt::format("{} is more GPUs than any topology holds", x)};
    out.push_back(int(x));
  }
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

// ---- hardware sweeps: --set FIELD=LIST, numbers of the topology JSON ----

/// Whether walking lo..hi by `step` (op '+': an increment, '*': a factor) ends within the
/// values a list may hold: the step must move lo in double arithmetic, and the values it
/// makes must number at most kMaxListValues. Judged before the walk, which could otherwise
/// run forever (1..2+1e-22 never leaves 1).
Status check_range(const std::string& item, double lo, double hi, char op, double step) {
  if ((op == '*' ? lo * step : lo + step) == lo)
    return Error{"", fmt::format("range '{}': the step {} does not move {} (a double has 16 digits)", item, step, lo)};
  const double count = 1 + (op == '*' ? std::log(hi / lo) / std::log(step) : (hi - lo) / step);
  if (!(count <= double(kMaxListValues)))
    return Error{"", fmt::format("range '{}' makes {:.3g} values, more than the {} a list may hold", item,
                                 std::floor(count), kMaxListValues)};
  return {};
}

}  // namespace

// ---- lists: "1,2,4", "4k..128k*2" (geometric), "64..256+64" (arithmetic), "1..8" (step 1) ----

Expected<std::vector<std::int64_t>> parse_list(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> out;
  std::set<std::int64_t> seen;
  auto push = [&](std::int64_t v) -> Status {
    if (v < 1) return Error{flag, fmt::format("values must be >= 1, got {} in '{}'", v, text)};
    if (seen.insert(v).second) out.push_back(v);
    if (out.size() > kMaxListValues)
      return Error{flag, fmt::format("more than {} values in '{}'", kMaxListValues, text)};
    return {};
  };
  if (text.empty()) return Error{flag, "expected a list like 1,2,4 or 4k..128k*2, got nothing"};
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) return Error{flag, fmt::format("empty item in '{}'", text)};
    const auto dots = item.find("..");
    if (dots == std::string::npos) {
      auto v = parse_size(item, flag);
      if (!v) return v.error();
      if (auto s = push(*v); !s) return s.error();
      continue;
    }
    std::string hi_text = item.substr(dots + 2), step_text;
    char op = '+';
    if (const auto k = hi_text.find_first_of("*+"); k != std::string::npos) {
      op = hi_text[k];
      step_text = hi_text.substr(k + 1);
      hi_text = hi_text.substr(0, k);
    }
    auto lo = parse_size(item.substr(0, dots), flag);
    if (!lo) return lo.error();
    auto hi = parse_size(hi_text, flag);
    if (!hi) return hi.error();
    std::int64_t step = 1;
    if (!step_text.empty()) {
      auto st = parse_size(step_text, flag);
      if (!st) return st.error();
      step = *st;
    } else if (op == '*') {
      return Error{flag, fmt::format("range '{}' needs a factor after '*', e.g. 4k..128k*2", item)};
    }
    if (*lo > *hi) return Error{flag, fmt::format("range '{}' runs downwards ({} > {})", item, *lo, *hi)};
    if (op == '*' && step < 2)
      return Error{flag, fmt::format("range '{}': the factor must be >= 2, got {}", item, step)};
    if (op == '+' && step < 1) return Error{flag, fmt::format("range '{}': the step must be >= 1, got {}", item, step)};
    for (std::int64_t v = *lo; v <= *hi;) {
      if (auto s = push(v); !s) return s.error();
      if (op == '*' ? v > *hi / step : v > *hi - step) break;  // the next value would pass hi (or overflow)
      v = op == '*' ? v * step : v + step;
    }
  }
  return out;
}

Expected<SetField> parse_set(const std::string& text) {
  const auto bad = [&](const std::string& why) { return Error{"--set", fmt::format("{} in '{}'", why, text)}; };
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return Error{"--set", fmt::format("expected FIELD=LIST like inter.bandwidth_gbps=25,50,100, got '{}'", text)};
  SetField s{text.substr(0, eq), {}};
  auto number = [&](const std::string& item) -> Expected<double> {
    // The flags' own grammar: decimal, no hex, no inf or nan.
    if (!check_number(item, NumberKind::Real)) return bad(fmt::format("expected a number, got '{}'", item));
    return decimal_value(item);
  };
  auto push = [&](double v) -> Status {
    if (std::find(s.values.begin(), s.values.end(), v) == s.values.end()) s.values.push_back(v);
    if (s.values.size() > kMaxListValues) return bad(fmt::format("more than {} values", kMaxListValues));
    return {};
  };
  const std::string list = text.substr(eq + 1);
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    const std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) return bad("empty item");
    const auto dots = item.find("..");
    if (dots == std::string::npos) {
      auto v = number(item);
      if (!v) return v.error();
      if (auto st = push(*v); !st) return st.error();
      continue;
    }
    // The step follows the upper end: '*' for a factor, '+' for an increment (not the sign of an exponent).
    std::string hi_text = item.substr(dots + 2);
    std::size_t op_at = hi_text.find('*');
    for (std::size_t k = 1; op_at == std::string::npos && k < hi_text.size(); ++k)
      if (hi_text[k] == '+' && hi_text[k - 1] != 'e' && hi_text[k - 1] != 'E') op_at = k;
    const char op = op_at == std::string::npos ? '+' : hi_text[op_at];
    auto lo = number(item.substr(0, dots));
    auto hi = number(hi_text.substr(0, op_at));
    auto step = op_at == std::string::npos ? Expected<double>(1.0) : number(hi_text.substr(op_at + 1));
    for (const auto* e : {&lo, &hi, &step})
      if (!*e) return e->error();
    if (*lo > *hi) return bad(fmt::format("range '{}' runs downwards", item));
    if (op == '*' && !(*lo > 0 && *step > 1))
      return bad(fmt::format("range '{}' needs a start > 0 and a factor > 1", item));
    if (op == '+' && !(*step > 0)) return bad(fmt::format("range '{}' needs a step > 0", item));
    if (auto st = check_range(item, *lo, *hi, op, *step); !st) return bad(st.error().what);
    // Each value from the start (no running sum to drift), rounded to 12 digits so 0.1..0.3+0.1 ends at 0.3;
    // check_range bounds the count, so the walk ends even where rounding makes values repeat.
    const double slack = 1e-9 * std::max(std::abs(*lo), std::abs(*hi));
    for (std::size_t k = 0; k <= kMaxListValues; ++k) {
      const double raw = op == '*' ? *lo * std::pow(*step, double(k)) : *lo + double(k) * *step;
      if (raw > *hi + slack) break;
      const double v = decimal_value(fmt::format("{:.12g}", raw));
      if (auto st = push(std::min(v, *hi)); !st) return st.error();
    }
  }
  return s;
}

Expected<std::vector<SetField>> parse_sets(const std::vector<std::string>& texts, std::size_t& points) {
  std::vector<SetField> sets;
  points = 1;
  for (const auto& text : texts) {
    CHARM_TRY_LET(set, parse_set(text));
    for (const auto& earlier : sets)
      if (earlier.field == set.field) return Error{"--set", fmt::format("{} is set twice", set.field)};
    points *= set.values.size();
    if (points > kMaxListValues)
      return Error{"--set", fmt::format("the sets make more than {} hardware points per topology", kMaxListValues)};
    sets.push_back(std::move(set));
  }
  return sets;
}

Expected<sim::SweepSpec> sweep_topologies(const std::vector<SweepTopology>& topologies,
                                          const std::vector<SetField>& sets) {
  sim::SweepSpec spec;
  if (auto st = add_topologies(spec, topologies, sets); !st) return st.error();
  return spec;
}

Status set_sweep_lists(sim::SweepSpec& spec, const SweepLists& lists) {
  spec.batch = lists.batch;
  spec.seq = lists.seq;
  spec.heads = lists.heads;
  spec.head_dim = lists.head_dim;
  spec.kv_heads = lists.kv_heads;
  CHARM_TRY_ASSIGN(spec.dtypes, distinct<ir::DType>(
                                    lists.dtypes, [](const std::string& s) { return ir::parse_dtype(s); }, "--dtype",
                                    "expected bf16, fp16 or fp32"));
  CHARM_TRY_ASSIGN(spec.layouts, distinct<ir::Layout>(
                                     lists.layouts, [](const std::string& s) { return ir::parse_layout(s); },
                                     "--layout", "expected contiguous or zigzag"));
  spec.causal = {lists.causal};
  CHARM_TRY_ASSIGN(spec.tp, gpu_counts(lists.tp, "--tp"));
  CHARM_TRY_ASSIGN(spec.cp, gpu_counts(lists.cp, "--cp"));
  CHARM_TRY_ASSIGN(spec.domains, gpu_counts(lists.domains, "--domains"));
  if (lists.algos.empty())
    spec.algos = sched::algorithm_names();
  else
    CHARM_TRY_ASSIGN(spec.algos, sched::resolve_algorithms(lists.algos));
  if (!(lists.reserved_gb >= 0) || !std::isfinite(lists.reserved_gb) || lists.reserved_gb > 1e4)
    return Error{"--reserved-gb", fmt::format("must be a number of GB in [0, 10000], got {}", lists.reserved_gb)};
  spec.reserved_gb = lists.reserved_gb;
  const auto pass = ir::parse_pass(lists.pass);
  if (!pass) return Error{"--pass", fmt::format("expected fwd, bwd or both, got '{}'", lists.pass)};
  if (*pass == ir::PassKind::Both)
    spec.passes = {ir::Phase::Fwd, ir::Phase::Bwd};
  else
    spec.passes = {*pass == ir::PassKind::Fwd ? ir::Phase::Fwd : ir::Phase::Bwd};
  return {};
}

Status check_sweep_fits(const sim::SweepSpec& spec, const std::vector<std::string>& names,
                        const sched::MemoryBudget& budget) {
  // A layout size no topology of the sweep can tile is a mistake, not a row to skip.
  for (const auto& [axis, flag] : {std::pair{&spec.tp, "--tp"}, std::pair{&spec.cp, "--cp"}})
    for (const int v : *axis)
      if (std::none_of(spec.topologies.begin(), spec.topologies.end(),
                       [&](const topo::Topology& t) { return t.num_gpus() % v == 0; }))
        return Error{flag, fmt::format("{} divides the GPUs of no topology of the sweep ({} has {})", v,
                                       spec.topologies.front().name, spec.topologies.front().num_gpus())};
  const std::size_t configs = spec.num_configs();
  if (configs > kMaxConfigs)
    return Error{"--seq", fmt::format("the lists make {} configurations, more than {}; narrow "
                                      "--batch/--seq/--heads/--head-dim/--tp/--cp/--domains/--set",
                                      configs, kMaxConfigs)};
  std::set<std::tuple<std::size_t, std::string, int, int, bool>> fit;
  std::vector<std::string> algos = spec.algos;
  algos.emplace_back(sched::baseline_algorithm());  // the baseline runs whether listed or not
  for (std::size_t i = 0; i < spec.num_configs(); ++i) {
    const sim::SweepConfig c = sim::sweep_config(spec, i);
    const topo::Topology& t = spec.topologies[c.topology];
    for (const ir::Phase phase : spec.passes)
      for (const auto& algo : algos) {
        ir::Workload w = c.workload;
        w.pass = phase == ir::Phase::Fwd ? ir::PassKind::Fwd : ir::PassKind::Bwd;
        const auto checked = sched::CheckedRequest::check({algo, w, t.num_gpus(), sim::default_domains(t)});
        if (!checked) continue;  // the planner refuses it: the sweep skips the row
        const sched::PlanRequest& req = checked->get();
        const auto key = std::tuple{c.topology, req.algo, int(w.pass), int(req.workload.layout), w.causal};
        if (fit.count(key) > 0) continue;
        if (auto s =
                budget.fits_plan(req, sched::kSimBytesPerOp, "the simulation", sim::simulation_symmetry(*checked, t));
            !s)
          return config_error(spec, c.topology, names, s.error().what);
        fit.insert(key);
      }
  }
  return {};
}

}  // namespace charm::app
