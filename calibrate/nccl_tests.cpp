#include "calibrate/nccl_tests.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>

#include "calibrate/measurements.hpp"

namespace charm::calib {

namespace {

std::vector<std::string> tokens(std::string_view s) {
  std::vector<std::string> out;
  std::istringstream in{std::string(s)};
  for (std::string t; in >> t;) out.push_back(t);
  return out;
}

bool parse_double(const std::string& s, double& v) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size() && std::isfinite(v);
}

/// Where each value sits in a data row, from the header line.
struct Layout {
  int header_line = 0;
  std::size_t fields = 0;
  std::size_t time = 0, algbw = 0, busbw = 0;
};

}  // namespace

namespace {

/// A header line's layout: where time, algbw and busbw are ("# size count type redop [root] time algbw
/// busbw #wrong time ..."); nullopt for a comment line that is not the header.
Expected<std::optional<Layout>> read_header(std::vector<std::string> tok, int line_no, const std::string& source) {
  if (tok.front() == "#")
    tok.erase(tok.begin());
  else
    tok.front().erase(0, 1);
  if (tok.size() < 8 || tok[0] != "size" || tok[1] != "count") return std::optional<Layout>();
  Layout l;
  l.header_line = line_no;
  l.fields = tok.size();
  const auto find = [&](const char* a, const char* b) {
    for (std::size_t i = 0; i < tok.size(); ++i)
      if (tok[i] == a || (b != nullptr && tok[i] == b)) return i;
    return tok.size();
  };
  l.time = find("time", "cputime");
  l.algbw = find("algbw", nullptr);
  l.busbw = find("busbw", nullptr);
  if (l.time == tok.size() || l.algbw == tok.size() || l.busbw == tok.size())
    return Error{fmt::format("{}:{}", source, line_no), "a nccl-tests header without time, algbw and busbw columns"};
  return std::optional<Layout>(l);
}

/// A table row under `layout`.
Expected<NcclSample> read_sample(const std::vector<std::string>& tok, const Layout& layout, int line_no,
                                 const std::string& source) {
  auto at = [&](const std::string& what) { return Error{fmt::format("{}:{}", source, line_no), what}; };
  if (layout.header_line == 0)
    return at("a table row before the nccl-tests header (# size count type ... time algbw busbw ...)");
  if (tok.size() != layout.fields)
    return at(fmt::format("expected {} fields as in the header (line {}), got {}", layout.fields, layout.header_line,
                          tok.size()));
  NcclSample s;
  s.line = line_no;
  double bytes = 0;
  if (!parse_double(tok[0], bytes) || bytes < 0 || bytes != std::floor(bytes))
    return at(fmt::format("size: must be a whole number of bytes, got '{}'", tok[0]));
  s.bytes = static_cast<std::int64_t>(bytes);
  if (!parse_double(tok[layout.time], s.time_us) || !(s.time_us > 0))
    return at(fmt::format("time: must be a number of microseconds > 0, got '{}'", tok[layout.time]));
  if (!parse_double(tok[layout.algbw], s.algbw_gbps) || s.algbw_gbps < 0)
    return at(fmt::format("algbw: must be a number >= 0, got '{}'", tok[layout.algbw]));
  if (!parse_double(tok[layout.busbw], s.busbw_gbps) || s.busbw_gbps < 0)
    return at(fmt::format("busbw: must be a number >= 0, got '{}'", tok[layout.busbw]));
  return s;
}

/// More than one run in one file is refused, naming the lines where they start.
Error several_runs(const std::vector<int>& runs, const std::string& source) {
  std::string lines;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (i == 8 && runs.size() > 9) {
      lines += fmt::format(", ... {}", runs.back());
      break;
    }
    lines += fmt::format("{}{}", i == 0 ? "" : ", ", runs[i]);
  }
  return Error{source, fmt::format("holds {} nccl-tests runs (they start on lines {}): one fit needs one run; split "
                                   "it into one file per run",
                                   runs.size(), lines)};
}

}  // namespace

Expected<NcclLog> parse_nccl_tests(std::string_view text, const std::string& source) {
  NcclLog log;
  log.source = source;
  Layout layout;
  int line_no = 0;
  std::size_t pos = 0;
  // Where each run starts: its header line, or the row whose size restarts the table. A header right
  // after another (no rows between) is the same run's (nccl-tests prints two header lines).
  std::vector<int> runs;
  const auto run_start = [&](int line) {
    if (runs.empty() || (!log.samples.empty() && log.samples.back().line > runs.back())) runs.push_back(line);
  };
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    // mpirun --tag-output: "[1,0]<stdout>:" before every line.
    if (!line.empty() && line.front() == '[')
      if (const auto p = line.find(">:");
          p != std::string_view::npos && line.substr(0, p).find("<std") != std::string_view::npos)
        line.remove_prefix(p + 2);
    auto tok = tokens(line);
    if (tok.empty()) continue;
    if (tok.front().front() == '#') {
      auto l = read_header(std::move(tok), line_no, source);
      if (!l) return l.error();
      if (!*l) continue;
      layout = **l;
      run_start(line_no);
      continue;
    }
    // Not a table row: NCCL's own lines ("NCCL version 2.19.3", "host:123 [0] NCCL INFO ...").
    if (!std::isdigit(static_cast<unsigned char>(tok.front().front()))) continue;
    auto s = read_sample(tok, layout, line_no, source);
    if (!s) return s.error();
    // One run prints each size once, growing: a smaller size starts another run (a size printed twice is
    // refused by the fit, which needs two sizes).
    if (!log.samples.empty() && log.samples.back().line > runs.back() && s->bytes < log.samples.back().bytes)
      run_start(line_no);
    log.samples.push_back(*s);
  }
  if (log.samples.empty())
    return Error{source, "no nccl-tests table rows (expected the output of sendrecv_perf, alltoall_perf, ...)"};
  if (runs.size() > 1) return several_runs(runs, source);
  return log;
}

Expected<NcclLog> load_nccl_tests(const std::string& path) {
  auto text = read_text_file(path, "an nccl-tests log");
  if (!text) return text.error();
  return parse_nccl_tests(*text, path);
}

Expected<AlphaBeta> fit_alpha_beta(const NcclLog& log) {
  // time = alpha + g * size, weighted by 1/time: minimise sum (alpha/t + g*s/t - 1)^2.
  double aa = 0, ab = 0, bb = 0, a1 = 0, b1 = 0;
  std::int64_t min_bytes = log.samples.front().bytes, max_bytes = min_bytes;
  AlphaBeta ab_fit;
  for (const auto& s : log.samples) {
    const double a = 1 / s.time_us, b = double(s.bytes) / s.time_us;
    aa += a * a;
    ab += a * b;
    bb += b * b;
    a1 += a;
    b1 += b;
    min_bytes = std::min(min_bytes, s.bytes);
    max_bytes = std::max(max_bytes, s.bytes);
    ab_fit.peak_busbw_gbps = std::max(ab_fit.peak_busbw_gbps, s.busbw_gbps);
  }
  if (min_bytes == max_bytes)
    return Error{log.source,
                 fmt::format("every row has the same size ({} B): a latency and a bandwidth need at least two sizes",
                             min_bytes)};
  double alpha = 0, g = 0;
  const double det = aa * bb - ab * ab;
  if (det > 0) {
    alpha = (a1 * bb - b1 * ab) / det;
    g = (aa * b1 - ab * a1) / det;
  }
  if (!(det > 0) || alpha < 0) {  // a negative start-up time is noise: fit the slope alone
    alpha = 0;
    g = b1 / bb;
  }
  if (!(g > 0)) return Error{log.source, "the times do not grow with the message size: no bandwidth to fit"};
  // The bus factor is the collective's (busbw / algbw); the largest message prints both most precisely.
  const auto& big = *std::max_element(log.samples.begin(), log.samples.end(),
                                      [](const NcclSample& x, const NcclSample& y) { return x.bytes < y.bytes; });
  ab_fit.bus_factor = big.algbw_gbps > 0 ? big.busbw_gbps / big.algbw_gbps : 1.0;
  ab_fit.alpha_us = alpha;
  ab_fit.beta_gbps = 1e-3 / g;  // g is us per byte; bytes/us = 1e-3 GB/s
  ab_fit.busbw_gbps = ab_fit.beta_gbps * ab_fit.bus_factor;
  ab_fit.rows = static_cast<int>(log.samples.size());
  return ab_fit;
}

}  // namespace charm::calib
