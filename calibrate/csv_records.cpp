#include "calibrate/csv_records.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

namespace charm::calib {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

std::string printable(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return out;
}

Expected<std::int64_t> parse_count(std::string_view s, std::int64_t max) {
  std::int64_t v = 0;
  const auto* end = s.data() + s.size();
  const auto r = std::from_chars(s.data(), end, v);
  if (s.empty() || r.ec != std::errc{} || r.ptr != end || s.front() == '-' || s.front() == '+')
    return Error{"", fmt::format("must be a whole number > 0, got '{}'", s)};
  if (v < 1 || v > max) return Error{"", fmt::format("must be in [1, {}], got {}", max, v)};
  return v;
}

RecordReader::RecordReader(std::string_view text, const std::string& source) : t_(text), source_(source) {
  if (t_.substr(0, 3) == "\xEF\xBB\xBF") t_.remove_prefix(3);
}
Expected<bool> RecordReader::next(Record& r) {
  while (pos_ < t_.size()) {
    const std::size_t nl = t_.find('\n', pos_);
    const std::string_view line = trim(t_.substr(pos_, nl == std::string_view::npos ? nl : nl - pos_));
    if (!line.empty() && line.front() != '#') break;
    pos_ = nl == std::string_view::npos ? t_.size() : nl + 1;
    ++line_;
  }
  if (pos_ >= t_.size()) return false;
  r.line = line_;
  r.fields.clear();
  while (true) {
    auto f = field(r);
    if (!f) return f.error();
    r.fields.push_back(std::move(*f));
    if (pos_ >= t_.size()) break;
    const char c = t_[pos_++];
    if (c == '\n') {
      ++line_;
      break;
    }
    // field() stops at a comma or a line end only.
  }
  return true;
}

Expected<std::string> RecordReader::field(const Record& r) {
  while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t')) ++pos_;
  if (pos_ < t_.size() && t_[pos_] == '"') {
    const int open_line = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= t_.size())
        return Error{fmt::format("{}:{}:{}", source_, open_line, r.fields.size() + 1),
                     "a quoted field is not closed (a \" with no closing \" before the end of the file)"};
      const char c = t_[pos_++];
      if (c == '"') {
        if (pos_ < t_.size() && t_[pos_] == '"') {
          out += '"';
          ++pos_;
          continue;
        }
        break;
      }
      if (c == '\n') ++line_;
      if (c == '\r' && pos_ < t_.size() && t_[pos_] == '\n') continue;  // CRLF inside quotes reads as LF
      out += c;
    }
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\t' || t_[pos_] == '\r')) ++pos_;
    if (pos_ < t_.size() && t_[pos_] != ',' && t_[pos_] != '\n')
      return Error{fmt::format("{}:{}:{}", source_, line_, r.fields.size() + 1),
                   "text after a quoted field's closing quote (a quote inside a quoted field is written \"\")"};
    return out;
  }
  const std::size_t end = t_.find_first_of(",\n", pos_);
  const std::string_view v = t_.substr(pos_, end == std::string_view::npos ? end : end - pos_);
  pos_ = end == std::string_view::npos ? t_.size() : end;
  if (v.find('"') != std::string_view::npos)
    return Error{fmt::format("{}:{}:{}", source_, line_, r.fields.size() + 1),
                 fmt::format("a quote inside an unquoted field ('{}'): quote the whole field, with \"\" for each "
                             "quote in it",
                             trim(v))};
  return std::string(trim(v));
}

Expected<double> parse_time_ms(std::string_view v) {
  double t = 0;
  const auto* end = v.data() + v.size();
  const auto r = std::from_chars(v.data(), end, t);
  if (r.ec != std::errc{} || r.ptr != end || !std::isfinite(t))
    return Error{"", fmt::format("must be a number of milliseconds, got '{}'", v)};
  if (!(t > 0)) return Error{"", fmt::format("must be > 0, got {}", v)};
  return t;
}

Status read_column_names(const Record& rec, const std::string& source, std::span<const std::string_view> names,
                         std::span<int> index, std::vector<std::optional<std::size_t>>& order,
                         std::vector<std::string>& ignored) {
  const auto& fields = rec.fields;
  auto at = [&](std::size_t field, const std::string& what) {
    return Error{fmt::format("{}:{}:{}", source, rec.line, field + 1), printable(what)};
  };
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto it = std::find(names.begin(), names.end(), fields[i]);
    if (it == names.end()) {
      // A column of the user's own (a note, the GPU model): read past, and named in one warning.
      if (fields[i].empty()) return at(i, "an empty column name in the header");
      ignored.push_back(fields[i]);
      order.push_back(std::nullopt);
      continue;
    }
    const auto c = std::size_t(it - names.begin());
    if (index[c] != 0) return at(i, fmt::format("column '{}' appears twice", fields[i]));
    index[c] = int(i) + 1;
    order.push_back(c);
  }
  return {};
}

Status read_count_cell(std::string_view v, std::int64_t max, std::int64_t& out, const BadCell& bad) {
  auto n = parse_count(v, max);
  if (!n) return bad(n.error().what);
  out = *n;
  return {};
}

Status read_workload_cell(WorkloadCell c, std::string_view v, ir::Workload& w, const BadCell& bad) {
  auto count = [&](std::int64_t max, std::int64_t& out) { return read_count_cell(v, max, out, bad); };
  switch (c) {
  case WorkloadCell::Pass: {
    auto p = ir::parse_pass(v);
    if (!p) return bad(p.error().what);
    w.pass = *p;
    return {};
  }
  case WorkloadCell::DType: {
    auto d = ir::parse_dtype(v);
    if (!d) return bad(d.error().what);
    w.dtype = *d;
    return {};
  }
  case WorkloadCell::Batch:
    return count(ir::kMaxBatch, w.batch);
  case WorkloadCell::Heads:
    return count(ir::kMaxHeads, w.heads);
  case WorkloadCell::KvHeads:
    return v.empty() ? Status{} : count(ir::kMaxHeads, w.kv_heads);
  case WorkloadCell::HeadDim:
    return count(ir::kMaxHeadDim, w.head_dim);
  }
  return {};
}

}  // namespace charm::calib
