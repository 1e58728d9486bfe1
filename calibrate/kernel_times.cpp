#include "calibrate/kernel_times.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <functional>
#include <optional>

#include "calibrate/csv_records.hpp"
#include "calibrate/measurements.hpp"

namespace charm::calib {

namespace {

enum class Col : std::uint8_t { Pass, Batch, Heads, KvHeads, HeadDim, DType, QTokens, KvTokens, Mask, TimeMs };
constexpr std::size_t kCols = 10;
constexpr std::array<std::string_view, kCols> kNames{"pass",  "batch",    "heads",     "kv_heads", "head_dim",
                                                     "dtype", "q_tokens", "kv_tokens", "mask",     "time_ms"};

std::string header_list() {
  std::string s;
  for (auto n : kNames) s += fmt::format("{}{}", s.empty() ? "" : ",", n);
  return s;
}

}  // namespace

namespace {

using Index = std::array<int, kCols>;  // 1-based field of each column

Error field_error(const std::string& source, int line, std::size_t field, const std::string& what) {
  return Error{fmt::format("{}:{}:{}", source, line, field + 1), printable(what)};
}

/// The header line: which column each field is (none: a column of the user's own, read past and
/// named in one warning), every column present once.
Status read_header(const Record& rec, const std::string& source, KernelTimeSet& set, Index& index,
                   std::vector<std::optional<Col>>& order) {
  const auto& fields = rec.fields;
  auto at = [&](std::size_t field, const std::string& what) { return field_error(source, rec.line, field, what); };
  std::vector<std::string> ignored;
  std::vector<std::optional<std::size_t>> columns;
  if (auto st = read_column_names(rec, source, kNames, index, columns, ignored); !st) return st;
  for (const auto& c : columns) order.push_back(c ? std::optional<Col>(Col(*c)) : std::nullopt);
  for (std::size_t c = 0; c < kCols; ++c)
    if (index[c] == 0)
      return at(fields.size(), fmt::format("missing column '{}' (the header needs: {})", kNames[c], header_list()));
  if (!ignored.empty())
    set.warnings.push_back(
        printable(fmt::format("{}:{}: ignoring column{} {}: not one charm reads (expected: {})", source, rec.line,
                              ignored.size() == 1 ? "" : "s", fmt::join(ignored, ", "), header_list())));
  return {};
}

/// One cell into `k` (kv_heads_given: the row names its kv heads).
Status read_cell(Col c, std::string_view v, KernelTime& k, bool& kv_heads_given, const BadCell& bad) {
  switch (c) {
  case Col::Pass: {
    auto p = ir::parse_pass(v);
    if (!p || *p == ir::PassKind::Both) return bad(fmt::format("must be fwd or bwd, got '{}'", v));
    k.workload.pass = *p;
    return {};
  }
  case Col::Mask: {
    const auto causal = parse_enum(v, kKernelMaskNames);
    if (!causal) return bad(fmt::format("must be full or causal, got '{}'", v));
    k.causal = *causal;
    return {};
  }
  case Col::KvHeads:
    kv_heads_given = !v.empty();
    return read_workload_cell(WorkloadCell::KvHeads, v, k.workload, bad);
  case Col::DType:
    return read_workload_cell(WorkloadCell::DType, v, k.workload, bad);
  case Col::Batch:
    return read_workload_cell(WorkloadCell::Batch, v, k.workload, bad);
  case Col::Heads:
    return read_workload_cell(WorkloadCell::Heads, v, k.workload, bad);
  case Col::HeadDim:
    return read_workload_cell(WorkloadCell::HeadDim, v, k.workload, bad);
  case Col::QTokens:
    return read_count_cell(v, std::int64_t{1} << 32, k.q_tokens, bad);
  case Col::KvTokens:
    return read_count_cell(v, std::int64_t{1} << 32, k.kv_tokens, bad);
  case Col::TimeMs: {
    auto t = parse_time_ms(v);
    if (!t) return bad(t.error().what);
    k.time_ms = *t;
    return {};
  }
  }
  return {};
}

/// A data line, checked against the header's `order`, and the row as a whole (GQA, a causal diagonal).
Expected<KernelTime> read_row(const Record& rec, const std::string& source, int header_line, const Index& index,
                              const std::vector<std::optional<Col>>& order) {
  const auto& fields = rec.fields;
  auto at = [&](std::size_t field, const std::string& what) { return field_error(source, rec.line, field, what); };
  if (fields.size() != order.size())
    return at(
        std::min(fields.size(), order.size()),
        fmt::format("expected {} fields as in the header (line {}), got {}", order.size(), header_line, fields.size()));
  KernelTime k;
  k.line = rec.line;
  bool kv_heads_given = false;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (!order[i]) continue;
    const Col c = *order[i];
    const std::string_view v = fields[i];  // quotes removed, blanks trimmed
    auto bad = [&](const std::string& what) { return at(i, fmt::format("{}: {}", kNames[std::size_t(c)], what)); };
    if (v.empty() && c != Col::KvHeads) return bad("missing value");
    if (auto st = read_cell(c, v, k, kv_heads_given, bad); !st) return st.error();
  }
  if (!kv_heads_given) k.workload.kv_heads = k.workload.heads;
  if (k.workload.heads % k.workload.kv_heads != 0)
    return at(std::size_t(index[std::size_t(Col::KvHeads)] - 1),
              fmt::format("kv_heads: {} does not divide heads {}", k.workload.kv_heads, k.workload.heads));
  if (k.causal && k.q_tokens != k.kv_tokens)
    return at(std::size_t(index[std::size_t(Col::KvTokens)] - 1),
              fmt::format("kv_tokens: a causal row is a diagonal block, q_tokens == kv_tokens (got {} and {})",
                          k.q_tokens, k.kv_tokens));
  k.workload.seq = k.q_tokens;
  k.workload.causal = k.causal;
  return k;
}

}  // namespace

Expected<KernelTimeSet> parse_kernel_times(std::string_view text, const std::string& source) {
  KernelTimeSet set;
  set.source = source;
  Index index{};
  std::vector<std::optional<Col>> order;  // none: a column of the user's own, read past
  auto st = read_table(
      text, source, header_list(), "kernel times",
      [&](const Record& rec) { return read_header(rec, source, set, index, order); },
      [&](const Record& rec, int header_line) -> Status {
        auto k = read_row(rec, source, header_line, index, order);
        if (!k) return k.error();
        set.rows.push_back(*k);
        return {};
      });
  if (!st) return st.error();
  return set;
}

Expected<KernelTimeSet> load_kernel_times(const std::string& path) {
  auto text = read_text_file(path, "a kernel-times file");
  if (!text) return text.error();
  return parse_kernel_times(*text, path);
}

std::string kernel_times_header() { return header_list(); }

std::string kernel_time_row(const KernelTime& k) {
  const auto& w = k.workload;
  return fmt::format("{},{},{},{},{},{},{},{},{},{}", ir::to_string(w.pass), w.batch, w.heads, w.kv_heads, w.head_dim,
                     ir::to_string(w.dtype), k.q_tokens, k.kv_tokens, k.causal ? "causal" : "full", k.time_ms);
}

}  // namespace charm::calib
