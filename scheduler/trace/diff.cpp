#include "scheduler/trace/diff.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace charm::trace {

namespace {

struct Slice {
  std::string name, kind;
  int rank = 0;
  double dur_ms = 0;
};

Expected<std::map<int, Slice>> slices(const nlohmann::json& t, const std::string& where) {
  if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array())
    return Error{where, "not a Chrome trace (no traceEvents array)"};
  std::map<int, Slice> out;
  for (const auto& e : t["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    if (!e.contains("args") || !e["args"].is_object() || !e["args"].contains("op") ||
        !e["args"]["op"].is_number_integer())
      return Error{where, "a slice without args.op: not a trace written by charm simulate or charm run"};
    if (!e.contains("dur") || !e["dur"].is_number()) return Error{where, "a slice without a numeric dur"};
    const int op = e["args"]["op"].get<int>();
    Slice s{e.value("name", ""), e.value("cat", ""), e.value("pid", 0), e["dur"].get<double>() / 1e3};
    if (!out.emplace(op, s).second) return Error{where, fmt::format("op {} has two slices", op)};
  }
  if (out.empty()) return Error{where, "no op slices"};
  return out;
}

double makespan_ms(const nlohmann::json& t) {
  if (t.contains("otherData") && t["otherData"].is_object() && t["otherData"].contains("makespan_ms") &&
      t["otherData"]["makespan_ms"].is_number())
    return t["otherData"]["makespan_ms"].get<double>();
  double end = 0;
  for (const auto& e : t["traceEvents"])
    if (e.is_object() && e.value("ph", "") == "X")
      end = std::max(end, (e.value("ts", 0.0) + e.value("dur", 0.0)) / 1e3);
  return end;
}

}  // namespace

Expected<TraceDiff> diff_traces(const nlohmann::json& predicted, const nlohmann::json& measured,
                                const std::string& predicted_name, const std::string& measured_name) {
  auto p = slices(predicted, predicted_name);
  if (!p) return p.error();
  auto m = slices(measured, measured_name);
  if (!m) return m.error();
  if (p->size() != m->size())
    return Error{measured_name, fmt::format("has {} ops, {} has {}: the traces are of different plans", m->size(),
                                            predicted_name, p->size())};
  TraceDiff d;
  d.predicted_makespan_ms = makespan_ms(predicted);
  d.measured_makespan_ms = makespan_ms(measured);
  std::map<std::string, KindDiff> kinds;
  for (const auto& [op, ps] : *p) {
    const auto it = m->find(op);
    if (it == m->end())
      return Error{measured_name, fmt::format("has no op {} ({} in {}): the traces are of different plans", op, ps.name,
                                              predicted_name)};
    const Slice& ms = it->second;
    if (ms.name != ps.name)
      return Error{measured_name, fmt::format("op {} is '{}' here and '{}' in {}: the traces are of different plans",
                                              op, ms.name, ps.name, predicted_name)};
    d.ops.push_back({op, ps.name, ps.kind, ps.rank, ps.dur_ms, ms.dur_ms});
    auto& k = kinds[ps.kind];
    k.kind = ps.kind;
    ++k.ops;
    k.predicted_ms += ps.dur_ms;
    k.measured_ms += ms.dur_ms;
  }
  for (auto& [name, k] : kinds) d.kinds.push_back(k);
  auto gap = [](double a, double b) { return std::abs(b - a); };
  std::stable_sort(d.kinds.begin(), d.kinds.end(), [&](const KindDiff& a, const KindDiff& b) {
    return gap(a.predicted_ms, a.measured_ms) > gap(b.predicted_ms, b.measured_ms);
  });
  std::stable_sort(d.ops.begin(), d.ops.end(), [&](const OpDiff& a, const OpDiff& b) {
    return gap(a.predicted_ms, a.measured_ms) > gap(b.predicted_ms, b.measured_ms);
  });
  return d;
}

}  // namespace charm::trace
