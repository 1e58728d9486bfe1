#include "topologies/kernel_table.hpp"

#include <fmt/format.h>

#include <charconv>
#include <map>
#include <mutex>

namespace charm::topo {

// The bundled tables: topologies/kernels/published.csv, compiled in (kernel_table_data.cpp.in).
extern const char* const kPublishedKernelCsv;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// The first `n` comma-separated fields, the rest of the line as one last field (a source may hold commas).
std::vector<std::string_view> fields_of(std::string_view line, std::size_t n) {
  std::vector<std::string_view> out;
  while (out.size() < n) {
    const auto comma = line.find(',');
    if (comma == std::string_view::npos) break;
    out.push_back(trim(line.substr(0, comma)));
    line.remove_prefix(comma + 1);
  }
  out.push_back(trim(line));
  return out;
}

bool number_of(std::string_view s, double& x) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), x);
  return r.ec == std::errc{} && r.ptr == s.data() + s.size() && x > 0;
}

Expected<KernelRow> row_of(const std::vector<std::string_view>& f, const std::string& where) {
  KernelRow r;
  if (f[2] != "fwd" && f[2] != "bwd") return Error{"kernel table", where + ": pass must be fwd or bwd"};
  if (f[3] != "full" && f[3] != "causal") return Error{"kernel table", where + ": mask must be full or causal"};
  r.fwd = f[2] == "fwd";
  r.causal = f[3] == "causal";
  double hd = 0, seq = 0, batch = 0, heads = 0, tflops = 0;
  if (!number_of(f[4], hd) || !number_of(f[5], seq) || !number_of(f[6], batch) || !number_of(f[7], heads) ||
      !number_of(f[8], tflops))
    return Error{"kernel table", where + ": head_dim, seqlen, batch, heads and tflops must be positive numbers"};
  if (f[9].empty()) return Error{"kernel table", where + ": every row names its source"};
  r.head_dim = static_cast<int>(hd);
  r.q_tokens = r.kv_tokens = seq;
  r.batch_heads = batch * heads;
  // FlashAttention's convention: 4 s^2 d per batch-head forward, half of it causal, 2.5x backward.
  const double flops = 4.0 * seq * seq * hd * r.batch_heads * (r.causal ? 0.5 : 1.0) * (r.fwd ? 1.0 : 2.5);
  r.seconds = flops / (tflops * 1e12);
  r.source = std::string(f[9]);
  return r;
}

}  // namespace

Expected<std::vector<KernelTable>> parse_kernel_tables(std::string_view csv, std::string_view name) {
  std::map<std::pair<std::string, std::string>, KernelTable> tables;
  int line_no = 0;
  bool header = true;
  while (!csv.empty()) {
    const auto nl = csv.find('\n');
    const std::string_view line = trim(csv.substr(0, nl));
    csv.remove_prefix(nl == std::string_view::npos ? csv.size() : nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    if (header) {  // library,family,pass,mask,head_dim,seqlen,batch,heads,tflops,source
      header = false;
      continue;
    }
    const auto f = fields_of(line, 9);
    const std::string where = fmt::format("{}:{}", name, line_no);
    if (f.size() != 10) return Error{"kernel table", where + ": expected 10 fields"};
    auto row = row_of(f, where);
    if (!row) return row.error();
    KernelTable& t = tables[{std::string(f[0]), std::string(f[1])}];
    t.library = f[0];
    t.family = f[1];
    t.rows.push_back(std::move(*row));
  }
  std::vector<KernelTable> out;
  for (auto& [key, t] : tables) {
    std::vector<std::string> sources;
    for (const auto& r : t.rows)
      if (std::find(sources.begin(), sources.end(), r.source) == sources.end()) sources.push_back(r.source);
    t.source = fmt::format("{}", fmt::join(sources, "; "));
    out.push_back(std::move(t));
  }
  return out;
}

const std::vector<std::string>& kernel_library_names() {
  static const std::vector<std::string> names{"fa2", "fa3", "cudnn"};
  return names;
}

Expected<std::shared_ptr<const KernelTable>> kernel_table(std::string_view library, std::string_view family) {
  static std::once_flag once;
  static std::vector<std::shared_ptr<const KernelTable>> bundled;
  std::call_once(once, [] {
    auto tables = parse_kernel_tables(kPublishedKernelCsv, "topologies/kernels/published.csv");
    // The bundled file is checked by its test; a broken one is a programming error.
    if (!tables) std::abort();
    for (auto& t : *tables) bundled.push_back(std::make_shared<const KernelTable>(std::move(t)));
  });
  std::vector<std::string> known;
  for (const auto& t : bundled) {
    if (t->library == library && t->family == family) return t;
    if (t->library == library) known.push_back(t->family);
  }
  if (std::find(kernel_library_names().begin(), kernel_library_names().end(), library) == kernel_library_names().end())
    return Error{"kernel", fmt::format("unknown kernel library \"{}\" (expected one of: {}, or a CSV file of kernel "
                                       "timings as charm bench-kernels writes)",
                                       library, fmt::join(kernel_library_names(), ", "))};
  return Error{"kernel", fmt::format("no published table of {} on {} GPUs (it has: {})", library,
                                     family.empty() ? "this model's" : family, fmt::join(known, ", "))};
}

}  // namespace charm::topo
