#include "scheduler/trace/diff.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace charm::trace {

namespace {

struct Slice {
  std::string name, kind;
  int rank = 0;
  double dur_ms = 0;
};

using nlohmann::json;

/// The fields of one object of a trace, each checked for its type: a field of another type
/// is an error naming the file and its JSON path (nlohmann's get<> would throw type_error.302,
/// naming neither). An absent field reads as empty or 0.
struct Fields {
  const json& obj;
  std::string path;          // "traceEvents[3]"
  const std::string& where;  // the file

  [[nodiscard]] Expected<const json*> get(const char* key, bool (json::*is)() const noexcept, const char* want) const {
    const auto it = obj.find(key);
    if (it == obj.end()) return static_cast<const json*>(nullptr);
    if (!((*it).*is)()) return Error{where, fmt::format("{}.{}: must be {}, got {}", path, key, want, it->type_name())};
    return &*it;
  }
  [[nodiscard]] Expected<std::string> text(const char* key) const {
    auto f = get(key, &json::is_string, "a string");
    if (!f) return f.error();
    return *f ? (*f)->get<std::string>() : std::string();
  }
  [[nodiscard]] Expected<double> number(const char* key) const {
    auto f = get(key, &json::is_number, "a number");
    if (!f) return f.error();
    return *f ? (*f)->get<double>() : 0.0;
  }
  /// A whole number in [0, INT_MAX]: an op id, a rank.
  [[nodiscard]] Expected<int> index(const char* key) const {
    auto f = get(key, &json::is_number_integer, "an integer");
    if (!f) return f.error();
    if (!*f) return 0;
    const bool fits = (*f)->is_number_unsigned() ? (*f)->get<std::uint64_t>() <= std::uint64_t(INT_MAX)
                                                 : (*f)->get<std::int64_t>() >= 0;
    if (!fits) return Error{where, fmt::format("{}.{}: must be in [0, {}], got {}", path, key, INT_MAX, (*f)->dump())};
    return (*f)->get<int>();
  }
};

/// Event `i` as (op, slice), or nothing when it is not a complete event ("ph": "X").
Expected<std::optional<std::pair<int, Slice>>> slice_of(const json& e, std::size_t i, const std::string& where) {
  using Out = std::optional<std::pair<int, Slice>>;
  if (!e.is_object()) return Out();
  const Fields f{e, fmt::format("traceEvents[{}]", i), where};
  auto ph = f.text("ph");
  if (!ph) return ph.error();
  if (*ph != "X") return Out();
  if (!e.contains("args") || !e["args"].is_object() || !e["args"].contains("op"))
    return Error{where, f.path + ": a slice without args.op: not a trace written by charm simulate or charm run"};
  if (!e.contains("dur")) return Error{where, f.path + ": a slice without a numeric dur"};
  auto op = Fields{e["args"], f.path + ".args", where}.index("op");
  if (!op) return op.error();
  auto dur = f.number("dur");
  if (!dur) return dur.error();
  auto name = f.text("name");
  if (!name) return name.error();
  auto cat = f.text("cat");
  if (!cat) return cat.error();
  auto pid = f.index("pid");
  if (!pid) return pid.error();
  return Out(std::pair{*op, Slice{*name, *cat, *pid, *dur / 1e3}});
}

Expected<std::map<int, Slice>> slices(const nlohmann::json& t, const std::string& where) {
  if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array())
    return Error{where, "not a Chrome trace (no traceEvents array)"};
  std::map<int, Slice> out;
  const auto& events = t["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    auto s = slice_of(events[i], i, where);
    if (!s) return s.error();
    if (!*s) continue;
    if (!out.emplace((*s)->first, (*s)->second).second)
      return Error{where, fmt::format("op {} has two slices", (*s)->first)};
  }
  if (out.empty()) return Error{where, "no op slices"};
  return out;
}

/// The makespan: otherData.makespan_ms, or the end of the last slice (slices() read them already).
Expected<double> makespan_ms(const nlohmann::json& t, const std::string& where) {
  if (t.contains("otherData") && t["otherData"].is_object() && t["otherData"].contains("makespan_ms")) {
    if (!t["otherData"]["makespan_ms"].is_number())
      return Error{where, fmt::format("otherData.makespan_ms: must be a number, got {}",
                                      t["otherData"]["makespan_ms"].type_name())};
    return t["otherData"]["makespan_ms"].get<double>();
  }
  double end = 0;
  const auto& events = t["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    if (!e.is_object() || e.value("ph", json()) != "X") continue;  // slices() checked every field but ts
    auto ts = Fields{e, fmt::format("traceEvents[{}]", i), where}.number("ts");
    if (!ts) return ts.error();
    end = std::max(end, (*ts + e["dur"].get<double>()) / 1e3);
  }
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
  auto pm = makespan_ms(predicted, predicted_name);
  if (!pm) return pm.error();
  auto mm = makespan_ms(measured, measured_name);
  if (!mm) return mm.error();
  d.predicted_makespan_ms = *pm;
  d.measured_makespan_ms = *mm;
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
