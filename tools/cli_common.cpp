#include "tools/cli_common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "scheduler/planners/planners.hpp"

namespace charm::cli {

void fail(Error e) { throw UsageError{std::move(e)}; }
int& exit_code() {
  static int code = 0;
  return code;
}

Expected<std::int64_t> parse_size(const std::string& text, const std::string& flag) {
  if (text.empty()) return Error{flag, "expected a number, got nothing"};
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return Error{flag, fmt::format("expected a number like 4096 or 128k, got '{}'", text)};
  double v = 0;
  try {
    v = std::stod(text.substr(0, i));
  } catch (...) {
    return Error{flag, fmt::format("expected a number like 4096 or 128k, got '{}'", text)};
  }
  std::string suffix = text.substr(i);
  double mult = 1;
  if (suffix == "k" || suffix == "K") mult = 1024;
  else if (suffix == "m" || suffix == "M") mult = 1024.0 * 1024;
  else if (suffix == "g" || suffix == "G") mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) return Error{flag, fmt::format("unknown size suffix '{}' in '{}' (use k, M or G)", suffix, text)};
  const double x = v * mult;
  if (!std::isfinite(x) || x > 9e15) return Error{flag, fmt::format("'{}' is too large", text)};
  if (x != std::floor(x)) return Error{flag, fmt::format("'{}' is not a whole number", text)};
  return static_cast<std::int64_t>(x);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s + ",") {
    if (c == ',') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else if (c != ' ') {
      cur += c;
    }
  }
  return out;
}

void WorkloadFlags::add(CLI::App& app, bool with_pass) {
  app.add_option("--batch,-b", batch, "batch size")->capture_default_str();
  app.add_option("--seq,-s", seq, "global sequence length (4096, 128k, ...)")->capture_default_str();
  app.add_option("--heads", heads, "query heads")->capture_default_str();
  app.add_option("--kv-heads", kv_heads, "key/value heads (GQA; default: = heads)");
  app.add_option("--head-dim", head_dim, "head dimension")->capture_default_str();
  app.add_option("--dtype", dtype, "bf16 | fp16 | fp32")->capture_default_str();
  app.add_flag("--causal", causal, "causal mask");
  app.add_option("--layout", layout, "contiguous | zigzag")->capture_default_str();
  if (with_pass) app.add_option("--pass", pass, "fwd | bwd | both")->capture_default_str();
}

ir::Workload WorkloadFlags::get() const {
  ir::Workload w;
  w.batch = unwrap(parse_size(batch, "--batch"));
  w.seq = unwrap(parse_size(seq, "--seq"));
  w.heads = unwrap(parse_size(heads, "--heads"));
  w.kv_heads = kv_heads.empty() ? w.heads : unwrap(parse_size(kv_heads, "--kv-heads"));
  w.head_dim = unwrap(parse_size(head_dim, "--head-dim"));
  auto with_flag = [](auto e, const char* flag) {
    if (!e) fail(Error{flag, e.error().what});
    return *e;
  };
  w.dtype = with_flag(ir::parse_dtype(dtype), "--dtype");
  w.layout = with_flag(ir::parse_layout(layout), "--layout");
  w.pass = with_flag(ir::parse_pass(pass), "--pass");
  w.causal = causal;
  return w;
}

void check_output_path(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  const fs::path dir = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(Error{flag, fmt::format("{}: cannot open for writing: folder '{}' does not exist", path, dir.string())});
  if (::access(dir.c_str(), W_OK) != 0) fail(Error{flag, fmt::format("{}: cannot open for writing: folder '{}' is not writable", path, dir.string())});
  if (fs::is_directory(path, ec)) fail(Error{flag, fmt::format("{}: cannot open for writing: it is a folder", path)});
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(Error{path, fmt::format("cannot open for writing: {}", std::strerror(errno))});
    out << content;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      fail(Error{path, "write failed"});
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(Error{path, fmt::format("cannot write: {}", std::strerror(err))});
  }
}

std::vector<Register>& registry() {
  static std::vector<Register> r;
  return r;
}

CLI::Validator algorithm_name() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        auto a = sched::resolve_algorithm(s);
        if (!a) return a.error().what;
        s = *a;
        return {};
      },
      "ALGO", "algorithm");
}

std::vector<std::string> algorithm_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> out;
  for (const auto& item : split_list(text)) {
    auto a = sched::resolve_algorithm(item, flag);
    if (!a) fail(a.error());
    if (std::find(out.begin(), out.end(), *a) == out.end()) out.push_back(*a);
  }
  if (out.empty()) fail(Error{flag, "names no algorithm"});
  return out;
}

std::optional<LaunchedJob> launched_job() {
  // Open MPI's mpirun, then MPICH's Hydra (PMI) and PMIx launchers.
  for (auto [rank_var, size_var] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"},
                                    std::pair{"PMIX_RANK", "PMIX_SIZE"}}) {
    const char* r = std::getenv(rank_var);
    const char* n = std::getenv(size_var);
    if (r == nullptr || n == nullptr) continue;
    char* end = nullptr;
    const long rank = std::strtol(r, &end, 10);
    if (end == r || *end != 0) continue;
    const long size = std::strtol(n, &end, 10);
    if (end == n || *end != 0 || size < 1 || rank < 0 || rank >= size) continue;
    return LaunchedJob{int(rank), int(size)};
  }
  return std::nullopt;
}

bool quiet_rank() {
  const auto job = launched_job();
  return job && job->size > 1 && job->rank > 0;
}

namespace {
std::string& max_memory_text() {
  static std::string text;
  return text;
}
} // namespace

void add_max_memory(CLI::App& app) {
  app.add_option("--max-memory", max_memory_text(),
                 "refuse work estimated to need more memory than this (4G, 512M; default: half of this machine's memory)");
}

double memory_budget_bytes() {
  if (!max_memory_text().empty()) {
    const auto v = unwrap(parse_size(max_memory_text(), "--max-memory"));
    if (v < (1 << 20)) fail(Error{"--max-memory", fmt::format("must be at least 1M, got {}", max_memory_text())});
    return double(v);
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? 0.5 * double(pages) * double(page) : 8e9;
}

void check_budget(double bytes, const std::string& what, const std::string& flag) {
  const double budget = memory_budget_bytes();
  if (bytes <= budget) return;
  auto gb = [](double b) { return b >= 1e12 ? fmt::format("{:.3g} TB", b / 1e12) : fmt::format("{:.3g} GB", b / 1e9); };
  fail(Error{flag, fmt::format("{} would need about {}, more than the {} budget ({}); make it smaller, or raise --max-memory",
                               what, gb(bytes), gb(budget), max_memory_text().empty() ? "half of this machine's memory" : "--max-memory")});
}

void check_plan_budget(const sched::PlanRequest& req, double extra_bytes_per_op, const std::string& what) {
  const auto e = sched::estimate_plan(req);
  check_budget(e.plan_bytes + extra_bytes_per_op * e.ops,
               fmt::format("{} ({} on {} ranks: about {:.2g} ops)", what, req.algo, req.ranks, e.ops), "--ranks");
}

} // namespace charm::cli
