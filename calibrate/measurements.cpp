#include "calibrate/measurements.hpp"

#include "calibrate/csv_records.hpp"
#include "support/enum_names.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <utility>

#include "scheduler/planners/planners.hpp"
#include "support/csv_field.hpp"
#include "support/input_file.hpp"
#include "support/suggest.hpp"

namespace charm::calib {

namespace {

constexpr std::array<std::string_view, kNumColumns> kNames{"algo",     "pass",     "batch",   "seq",    "heads",
                                                           "kv_heads", "head_dim", "dtype",   "causal", "layout",
                                                           "time_ms",  "ranks",    "domains", "metric"};

bool optional_column(Column c) { return c == Column::Ranks || c == Column::Domains || c == Column::Metric; }

std::string expected_list() {
  std::string s;
  for (auto n : kNames) s += fmt::format("{}{}", s.empty() ? "" : ", ", n);
  return s;
}

constexpr EnumName<Metric> kMetricNames[] = {{"time", Metric::Time},
                                             {"comm", Metric::Comm},
                                             {"compute", Metric::Compute},
                                             {"comm-alone", Metric::CommAlone},
                                             {"compute-alone", Metric::ComputeAlone}};

Expected<Metric> parse_metric(std::string_view v) {
  if (v.empty()) return Metric::Time;
  if (auto m = parse_enum(v, kMetricNames)) return *m;
  return Error{"", fmt::format("must be {}, got '{}'", enum_names_text(kMetricNames), v)};
}

/// The causal column: 0 or 1.
constexpr EnumName<bool> kCausalNames[] = {{"0", false}, {"1", true}};

}  // namespace

std::string_view column_name(Column c) { return kNames[static_cast<std::size_t>(c)]; }

std::string_view to_string(Metric m) { return enum_name(m, kMetricNames); }

Column column_of(Field field) {
  static constexpr std::pair<Field, Column> kColumnOfField[] = {
      {Field::Pass, Column::Pass},     {Field::Batch, Column::Batch},     {Field::Seq, Column::Seq},
      {Field::Heads, Column::Heads},   {Field::KvHeads, Column::KvHeads}, {Field::HeadDim, Column::HeadDim},
      {Field::Layout, Column::Layout}, {Field::Ranks, Column::Ranks},     {Field::Domains, Column::Domains}};
  for (const auto& [f, c] : kColumnOfField)
    if (f == field) return c;
  return Column::Algo;
}

std::string MeasurementSet::where(const Measurement& m, Column c) const {
  const int col = column_index[std::size_t(m.file)][static_cast<std::size_t>(c)];
  // A default (ranks, domains) has no cell: point at the line's first one.
  return fmt::format("{}:{}:{}", files[std::size_t(m.file)], m.line, col > 0 ? col : 1);
}

namespace {

/// Where a field is: "FILE:LINE:COLUMN" and what is wrong there.
Error field_error(const std::string& source, int line, std::size_t field, const std::string& what) {
  return Error{fmt::format("{}:{}:{}", source, line, field + 1), printable(what)};
}

/// The header line: which column each field is (none: a column charm does not read, named in one
/// warning), and every required column present once.
Status read_header(const Record& rec, const std::string& source, MeasurementSet& set,
                   std::vector<std::optional<Column>>& order) {
  auto& column_index = set.column_index[0];
  const auto& fields = rec.fields;
  auto at = [&](std::size_t field, const std::string& what) { return field_error(source, rec.line, field, what); };
  std::vector<std::string> ignored;  // header names charm does not read, kept by the user
  std::vector<std::optional<std::size_t>> columns;
  if (auto st = read_column_names(rec, source, kNames, column_index, columns, ignored); !st) return st;
  for (const auto& c : columns) order.push_back(c ? std::optional<Column>(Column(*c)) : std::nullopt);
  for (std::size_t c = 0; c < kNumColumns; ++c)
    if (column_index[c] == 0 && !optional_column(Column(c)))
      return at(fields.size(),
                fmt::format("missing column '{}' (the header needs: {}; ranks, domains and metric are optional)",
                            kNames[c], expected_list()));
  if (!ignored.empty()) {
    std::vector<std::string> names;
    std::vector<std::string> known(kNames.begin(), kNames.end());
    for (const auto& n : ignored) {
      const auto near = closest_name(n, known);
      names.push_back(fmt::format("'{}'{}", printable(n), near ? fmt::format(" (did you mean '{}'?)", *near) : ""));
    }
    set.warnings.push_back(fmt::format("{}:{}: ignoring column{} {}: not one charm reads (expected: {})", source,
                                       rec.line, ignored.size() == 1 ? "" : "s", fmt::join(names, ", "),
                                       expected_list()));
  }
  return {};
}

/// A cell that names something: the algorithm, pass, dtype, layout, causal flag or metric.
Status read_name_cell(Column c, std::string_view v, Measurement& m, const BadCell& bad) {
  switch (c) {
  case Column::Algo: {
    const auto& names = sched::algorithm_names();
    if (std::find(names.begin(), names.end(), v) == names.end())
      return bad(fmt::format("unknown algorithm '{}' (expected one of: {})", v, fmt::join(names, ", ")));
    m.algo = std::string(v);
    return {};
  }
  case Column::Pass:
    return read_workload_cell(WorkloadCell::Pass, v, m.workload, bad);
  case Column::DType:
    return read_workload_cell(WorkloadCell::DType, v, m.workload, bad);
  case Column::Layout: {
    auto l = ir::parse_layout(v);
    if (!l) return bad(l.error().what);
    m.workload.layout = *l;
    return {};
  }
  case Column::Causal: {
    const auto causal = parse_enum(v, kCausalNames);
    if (!causal) return bad(fmt::format("must be 0 or 1, got '{}'", v));
    m.workload.causal = *causal;
    return {};
  }
  default: {
    auto mt = parse_metric(v);
    if (!mt) return bad(mt.error().what);
    m.metric = *mt;
    return {};
  }
  }
}

/// A cell that counts or times: the workload's sizes, the ranks and domains, the time.
Status read_number_cell(Column c, std::string_view v, Measurement& m, std::string& kv_heads, const BadCell& bad) {
  auto count = [&](std::int64_t max) -> Expected<std::int64_t> {
    auto n = parse_count(v, max);
    if (!n) return bad(n.error().what);
    return n;
  };
  switch (c) {
  case Column::KvHeads:
    kv_heads = std::string(v);
    return read_workload_cell(WorkloadCell::KvHeads, v, m.workload, bad);
  case Column::Ranks:
  case Column::Domains:
    if (!v.empty()) {
      auto n = count(4096);
      if (!n) return n.error();
      (c == Column::Ranks ? m.ranks : m.domains) = int(*n);
    }
    return {};
  case Column::TimeMs: {
    auto t = parse_time_ms(v);
    if (!t) return bad(t.error().what);
    m.time_ms = *t;
    return {};
  }
  case Column::Seq:
    return read_count_cell(v, std::int64_t{1} << 40, m.workload.seq, bad);
  default:  // Batch, Heads, HeadDim
    return read_workload_cell(c == Column::Batch   ? WorkloadCell::Batch
                              : c == Column::Heads ? WorkloadCell::Heads
                                                   : WorkloadCell::HeadDim,
                              v, m.workload, bad);
  }
}

/// One cell of a row into `m` (kv_heads: the cell's text, empty when the row leaves it to heads).
Status read_cell(Column c, std::string_view v, Measurement& m, std::string& kv_heads, const BadCell& bad) {
  switch (c) {
  case Column::Algo:
  case Column::Pass:
  case Column::DType:
  case Column::Layout:
  case Column::Causal:
  case Column::Metric:
    return read_name_cell(c, v, m, bad);
  default:
    return read_number_cell(c, v, m, kv_heads, bad);
  }
}

/// A data line, checked against the header's `order`.
Expected<Measurement> read_row(const Record& rec, const std::string& source, int header_line,
                               const std::vector<std::optional<Column>>& order) {
  const auto& fields = rec.fields;
  if (fields.size() != order.size())
    return field_error(
        source, rec.line, std::min(fields.size(), order.size()),
        fmt::format("expected {} fields as in the header (line {}), got {}", order.size(), header_line, fields.size()));
  Measurement m;
  m.line = rec.line;
  std::string kv_heads;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (!order[i]) continue;  // a column charm does not read
    const Column c = *order[i];
    const std::string_view v = fields[i];
    const std::string name(column_name(c));
    auto bad = [&](const std::string& what) {
      return field_error(source, rec.line, i, fmt::format("{}: {}", name, what));
    };
    if (v.empty() && !optional_column(c) && c != Column::KvHeads) return bad("missing value");
    if (auto st = read_cell(c, v, m, kv_heads, bad); !st) return st.error();
  }
  if (kv_heads.empty()) m.workload.kv_heads = m.workload.heads;
  return m;
}

}  // namespace

Expected<MeasurementSet> parse_measurements(std::string_view text, const std::string& source) {
  MeasurementSet set;
  set.source = source;
  set.files = {source};
  set.column_index.resize(1);
  std::vector<std::optional<Column>> order;  // column of each header field (none: ignored)
  auto st = read_table(
      text, source, expected_list(), "measurements",
      [&](const Record& rec) { return read_header(rec, source, set, order); },
      [&](const Record& rec, int header_line) -> Status {
        auto m = read_row(rec, source, header_line, order);
        if (!m) return m.error();
        set.rows.push_back(std::move(m).value());
        return {};
      });
  if (!st) return st.error();
  return set;
}

std::string measurements_header() {
  std::string s;
  for (std::size_t c = 0; c < kWrittenColumns; ++c) s += fmt::format("{}{}", s.empty() ? "" : ",", kNames[c]);
  return s;
}

std::string measurement_row(const Measurement& m) {
  const auto& w = m.workload;
  std::array<std::string, kNumColumns> cell;
  auto set = [&](Column c, std::string v) { cell[std::size_t(c)] = std::move(v); };
  set(Column::Algo, csv_field(m.algo));  // a plan's algo is any text
  set(Column::Pass, std::string(ir::to_string(w.pass)));
  set(Column::Batch, std::to_string(w.batch));
  set(Column::Seq, std::to_string(w.seq));
  set(Column::Heads, std::to_string(w.heads));
  set(Column::KvHeads, std::to_string(w.kv_heads));
  set(Column::HeadDim, std::to_string(w.head_dim));
  set(Column::DType, std::string(ir::to_string(w.dtype)));
  set(Column::Causal, w.causal ? "1" : "0");
  set(Column::Layout, std::string(ir::to_string(w.layout)));
  set(Column::TimeMs, fmt::format("{}", m.time_ms));  // shortest form that reads back exactly
  set(Column::Ranks, m.ranks > 0 ? std::to_string(m.ranks) : "");
  set(Column::Domains, m.domains > 0 ? std::to_string(m.domains) : "");
  std::string s;
  for (std::size_t c = 0; c < kWrittenColumns; ++c) s += (c == 0 ? "" : ",") + cell[c];
  return s;
}

Status append_measurement(const std::string& path, const Measurement& m) {
  std::string existing;
  if (std::error_code ec; std::filesystem::exists(path, ec)) {
    auto text = read_text_file(path, "the measurements file");
    if (!text) return text.error();
    existing = std::move(*text);
  }
  // The file's header: its first line that is neither empty nor a comment.
  std::string_view header;
  for (std::size_t pos = existing.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0; pos < existing.size() && header.empty();) {
    const std::size_t nl = existing.find('\n', pos);
    const std::string_view line = trim(std::string_view(existing).substr(pos, nl - pos));
    pos = nl == std::string::npos ? existing.size() : nl + 1;
    if (!line.empty() && line.front() != '#') header = line;
  }
  const std::string mine = measurements_header();
  if (!header.empty() && header != mine)
    return Error{path, fmt::format("its header is '{}', not '{}': append to a new file", header, mine)};
  std::string out;
  if (!existing.empty() && existing.back() != '\n') out += '\n';
  if (header.empty()) out += mine + '\n';
  out += measurement_row(m) + '\n';
  std::ofstream f(path, std::ios::app | std::ios::binary);
  if (!f) return Error{path, fmt::format("cannot open for appending: {}", std::strerror(errno))};
  f.write(out.data(), std::streamsize(out.size()));
  f.flush();
  if (!f) return Error{path, fmt::format("cannot write: {}", std::strerror(errno))};
  return {};
}

Expected<std::string> read_text_file(const std::string& path, const char* what) {
  return read_input_file(path, what, fmt::format("cannot open {}", what));
}

Expected<MeasurementSet> load_measurements(const std::string& paths) {
  MeasurementSet all;
  std::size_t start = 0;
  while (start <= paths.size()) {
    std::size_t end = paths.find(',', start);
    if (end == std::string::npos) end = paths.size();
    const std::string path(trim(std::string_view(paths).substr(start, end - start)));
    start = end + 1;
    if (path.empty()) return Error{Field::Measurements, fmt::format("an empty file name in '{}'", paths)};
    auto text = read_text_file(path, "a measurements file");
    if (!text) return text.error();
    auto set = parse_measurements(*text, path);
    if (!set) return set.error();
    const int file = static_cast<int>(all.files.size());
    all.source += (all.source.empty() ? "" : ",") + path;
    all.files.push_back(path);
    all.column_index.push_back(set->column_index[0]);
    for (auto& w : set->warnings) all.warnings.push_back(std::move(w));
    for (auto& m : set->rows) {
      m.file = file;
      all.rows.push_back(std::move(m));
    }
  }
  return all;
}

}  // namespace charm::calib
