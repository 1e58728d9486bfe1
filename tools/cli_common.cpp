#include "tools/cli_common.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <unordered_map>

#include "scheduler/support/input_file.hpp"
#include "scheduler/support/json_text.hpp"

#include "scheduler/planners/planners.hpp"

namespace charm::cli {

void fail(Error e) { throw UsageError{std::move(e)}; }
int& exit_code() {
  static int code = 0;
  return code;
}

namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Decimal digits with at most one point and a digit on one side of it: "12", "1.5", ".5", "5.".
bool decimal_mantissa(std::string_view s) {
  const auto dot = s.find('.');
  if (dot == std::string_view::npos) return all_digits(s);
  const auto a = s.substr(0, dot), b = s.substr(dot + 1);
  return (all_digits(a) || a.empty()) && (all_digits(b) || b.empty()) && !(a.empty() && b.empty());
}

/// The power of ten of a decimal number's first significant digit: "120" 2, "0.05" -2, "1e400" 400.
double decimal_order(std::string_view text) {
  const auto e = text.find_first_of("eE");
  double exp = 0;
  if (e != std::string_view::npos) {
    auto x = text.substr(e + 1);
    if (x.starts_with('+')) x.remove_prefix(1);
    long long v = 0;
    const auto r = std::from_chars(x.data(), x.data() + x.size(), v);
    exp = r.ec == std::errc{} ? double(v) : x.starts_with('-') ? -1e300 : 1e300;  // an exponent past 64 bits
  }
  const auto mant = text.substr(0, e);
  const auto digit = mant.find_first_of("123456789");
  const auto dot = std::min(mant.find('.'), mant.size());
  if (digit == std::string_view::npos) return 0;
  return exp + (digit < dot ? double(dot - digit) - 1 : -double(digit - dot));
}

}  // namespace

double decimal_value(std::string_view text) {
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc::result_out_of_range) return v;
  const double magnitude = decimal_order(text) > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return text.starts_with('-') ? -magnitude : magnitude;
}

Expected<std::string> check_number(const std::string& text, NumberKind kind) {
  const bool negative = !text.empty() && text[0] == '-';
  const std::string_view body = std::string_view(text).substr(negative ? 1 : 0);
  if (kind == NumberKind::Real) {
    const auto e = body.find_first_of("eE");
    const auto mant = body.substr(0, e);
    auto exp = e == std::string_view::npos ? std::string_view{} : body.substr(e + 1);
    if (!exp.empty() && (exp[0] == '+' || exp[0] == '-')) exp.remove_prefix(1);
    const bool ok = decimal_mantissa(mant) && (e == std::string_view::npos || all_digits(exp));
    if (!ok) return Error{"", fmt::format("expected a decimal number like 2.5 or 1e-3, got '{}'", text)};
    if (!std::isfinite(decimal_value(text))) return Error{"", fmt::format("'{}' is too large", text)};
    return text;
  }
  if (!all_digits(body)) return Error{"", fmt::format("expected a decimal whole number like 8, got '{}'", text)};
  if (negative && kind == NumberKind::Unsigned) return Error{"", fmt::format("must be >= 0, got {}", text)};
  // Exact for any length: digits past 20 are too large for every flag.
  const auto first = body.find_first_not_of('0');
  const std::string_view digits = first == std::string_view::npos ? std::string_view("0") : body.substr(first);
  std::uint64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  const bool fits = r.ec == std::errc{} && (kind == NumberKind::Unsigned ? true
                                            : negative                   ? v <= std::uint64_t{1} << 31
                                                       : v <= std::uint64_t(std::numeric_limits<std::int32_t>::max()));
  if (!fits)
    return Error{"", kind == NumberKind::Unsigned
                         ? fmt::format("must be <= {}, got {}", std::numeric_limits<std::uint64_t>::max(), text)
                     : negative ? fmt::format("must be >= {}, got {}", std::numeric_limits<std::int32_t>::min(), text)
                                : fmt::format("must be <= {}, got {}", std::numeric_limits<std::int32_t>::max(), text)};
  return (negative && v != 0 ? "-" : "") + std::string(digits);
}

void apply_number_grammar(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    // CLI11 names the type an option converts to: INT, UINT, FLOAT (TEXT, ... for the rest).
    static constexpr EnumName<std::optional<NumberKind>> kTypes[] = {{"TEXT", std::nullopt},
                                                                     {"INT", NumberKind::Integer},
                                                                     {"UINT", NumberKind::Unsigned},
                                                                     {"FLOAT", NumberKind::Real}};
    std::string type = opt->get_type_name();
    const auto typed = parse_enum(type.substr(0, type.find(':')), kTypes);
    if (!typed) continue;  // a type of its own: CLI11 checks it
    if (!*typed) {
      // An empty path reads as "not given" further on: `--trace ""` would write nothing, exit 0.
      opt->check(CLI::Validator(
          [](const std::string& value) {
            return value.empty() ? std::string("an empty value: give the flag a value, or leave it out")
                                 : std::string{};
          },
          ""));
      continue;
    }
    const NumberKind kind = **typed;
    opt->transform(CLI::Validator(
        [kind](std::string& value) {
          auto checked = check_number(value, kind);
          if (!checked) return checked.error().what;
          value = std::move(*checked);
          return std::string{};
        },
        ""));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) apply_number_grammar(*sub);
}

Expected<std::int64_t> parse_size(const std::string& text, const std::string& flag) {
  if (text.empty()) return Error{flag, "expected a number, got nothing"};
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  // The grammar of every number: decimal digits, one point at most ("1.5.0k" is no size).
  if (i == 0 || !decimal_mantissa(std::string_view(text).substr(0, i)))
    return Error{flag, fmt::format("expected a number like 4096 or 128k, got '{}'", text)};
  const double v = decimal_value(std::string_view(text).substr(0, i));
  static constexpr EnumName<double> kSuffixes[] = {
      {"", 1},          {"k", 1024.0},       {"K", 1024.0},      {"m", 1048576.0},
      {"M", 1048576.0}, {"g", 1073741824.0}, {"G", 1073741824.0}};
  const std::string suffix = text.substr(i);
  const std::optional<double> mult = parse_enum(suffix, kSuffixes);
  if (!mult) return Error{flag, fmt::format("unknown size suffix '{}' in '{}' (use k, M or G)", suffix, text)};
  const double x = v * *mult;
  if (!std::isfinite(x) || x > 9e15) return Error{flag, fmt::format("'{}' is too large", text)};
  if (x != std::floor(x)) return Error{flag, fmt::format("'{}' is not a whole number", text)};
  return static_cast<std::int64_t>(x);
}

std::vector<std::int32_t> parse_gpu_list(const std::string& s, const std::string& flag, std::int64_t limit,
                                         const std::string& what) {
  std::vector<std::int32_t> map;
  std::vector<std::int32_t> sorted;
  for (const auto& item : split_list(s)) {
    const std::int64_t g = unwrap(parse_size(item, flag));
    if (g < 0 || g >= limit) fail(Error{flag, fmt::format("GPU {} is not in [0, {}): {}", g, limit, what)});
    map.push_back(std::int32_t(g));
  }
  if (map.empty()) fail(Error{flag, "names no GPU"});
  sorted = map;
  std::sort(sorted.begin(), sorted.end());
  if (const auto d = std::adjacent_find(sorted.begin(), sorted.end()); d != sorted.end())
    fail(Error{flag, fmt::format("GPU {} is named twice", *d)});
  return map;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  constexpr const char* kSpace = " \t\n\r\f\v";
  for (std::size_t start = 0; start <= s.size();) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    const std::string item = s.substr(start, comma - start);
    start = comma + 1;
    // Spaces around an item go; spaces inside it ("my topo.json") are part of the name.
    const auto first = item.find_first_not_of(kSpace);
    if (first != std::string::npos) out.push_back(item.substr(first, item.find_last_not_of(kSpace) - first + 1));
  }
  return out;
}

void WorkloadFlags::add(CLI::App& app, bool with_pass) {
  app.add_option("--batch,-b", batch, "batch size")->capture_default_str();
  app.add_option("--seq,-s", seq, "global sequence length (4096, 128k, ...)")->capture_default_str();
  heads_opt = app.add_option("--heads", heads, "query heads")->capture_default_str();
  kv_heads_opt = app.add_option("--kv-heads", kv_heads, "key/value heads (GQA; default: = heads)");
  head_dim_opt = app.add_option("--head-dim", head_dim, "head dimension")->capture_default_str();
  app.add_option("--model", model,
                 "a Hugging Face config.json: its num_attention_heads, num_key_value_heads and head_dim (or "
                 "hidden_size / heads) give the workload's heads, and num_hidden_layers advise's --layers");
  app.add_option("--dtype", dtype, "bf16 | fp16 | fp32")->capture_default_str();
  app.add_flag("--causal", causal, "causal mask");
  app.add_option("--mask", mask,
                 "causal | full | document:L1,L2,... (packed documents of these token counts, causal within each; "
                 "they sum to --seq) | cu_seqlens:FILE (the same as FlashAttention's cumulative offsets 0,L1,L1+L2,"
                 "...,S: integers in a text file) | sliding:W (causal, each query sees its W most recent keys)");
  app.add_option("--layout", layout,
                 "contiguous | zigzag (with --mask document: each document zigzag on its own, TransformerEngine's THD) "
                 "| balanced (with --mask document: a solver places chunks of the documents on the ranks for the least "
                 "simulated time; on it the ring forwards a shard only as far as its last reader)")
      ->capture_default_str();
  app.add_option("--solve-ms", solve_ms,
                 "--layout balanced: the solver's time budget in ms (its structured candidates always run)")
      ->capture_default_str();
  app.add_option("--solve-seed", solve_seed, "--layout balanced: the seed of the solver's shuffled candidates")
      ->capture_default_str();
  if (with_pass) app.add_option("--pass", pass, "fwd | bwd | both")->capture_default_str();
}

namespace {

/// "cu_seqlens:FILE" as "document:L1,L2,...": the file holds FlashAttention's cumulative sequence
/// offsets (0, L1, L1+L2, ..., S) as integers separated by commas or whitespace (a tensor printed
/// with numpy.savetxt or as a list). Other specs are returned unchanged.
std::string mask_from_cu_seqlens(const std::string& spec) {
  constexpr std::string_view kPrefix = "cu_seqlens:";
  if (spec.rfind(kPrefix, 0) != 0) return spec;
  const std::string path = spec.substr(kPrefix.size());
  const std::string text = unwrap(read_input_file(path, "a cu_seqlens file", "cannot open for reading"));
  std::string items;
  for (const char c : text) items += (c == ',' || std::isspace(static_cast<unsigned char>(c))) ? ',' : c;
  std::vector<std::int64_t> at;
  for (const auto& item : split_list(items)) {
    const auto v = parse_size(item, "--mask");
    if (!v) fail(Error{"--mask", fmt::format("{}: '{}' is not a token offset", path, item)});
    at.push_back(*v);
  }
  if (at.size() < 2 || at.front() != 0)
    fail(Error{"--mask",
               fmt::format("{}: cu_seqlens start at 0 and hold one offset more than there are documents", path)});
  std::string doc = "document:";
  for (std::size_t i = 1; i < at.size(); ++i) {
    if (at[i] <= at[i - 1])
      fail(Error{"--mask",
                 fmt::format("{}: cu_seqlens must increase: offset {} is {} after {}", path, i, at[i], at[i - 1])});
    doc += fmt::format("{}{}", i > 1 ? "," : "", at[i] - at[i - 1]);
  }
  return doc;
}

}  // namespace

namespace {

/// The attention fields of a Hugging Face config.json (a multimodal one's "text_config" when the top has none).
struct ModelConfig {
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0, layers = 0;
};

std::int64_t config_count(const nlohmann::json& c, const char* key, const std::string& path) {
  if (!c.contains(key)) return 0;
  const auto& v = c.at(key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > (1 << 20))
    fail(Error{"--model", fmt::format("{}: {} must be a positive integer, got {}", path, key, v.dump())});
  return v.get<std::int64_t>();
}

ModelConfig read_model_config(const std::string& path) {
  const std::string text = unwrap(read_input_file(path, "a model config", "cannot open for reading"));
  nlohmann::json c = unwrap(parse_json_strict(text, path));
  if (!c.is_object()) fail(Error{"--model", fmt::format("{}: a config.json is a JSON object", path)});
  if (!c.contains("num_attention_heads") && c.contains("text_config") && c["text_config"].is_object())
    c = c["text_config"];
  ModelConfig m;
  m.heads = config_count(c, "num_attention_heads", path);
  if (m.heads == 0) fail(Error{"--model", fmt::format("{}: no num_attention_heads (the query heads)", path)});
  m.kv_heads = config_count(c, "num_key_value_heads", path);
  if (m.kv_heads == 0) m.kv_heads = m.heads;  // no GQA
  m.head_dim = config_count(c, "head_dim", path);
  if (m.head_dim == 0) {
    const std::int64_t hidden = config_count(c, "hidden_size", path);
    if (hidden == 0 || hidden % m.heads != 0)
      fail(Error{"--model", fmt::format("{}: no head_dim, and no hidden_size that num_attention_heads ({}) divides",
                                        path, m.heads)});
    m.head_dim = hidden / m.heads;
  }
  m.layers = config_count(c, "num_hidden_layers", path);
  return m;
}

/// A count from the model's config, unless the flag gives it too: then they must agree.
std::int64_t from_model(std::int64_t model_value, const CLI::Option* opt, const std::string& flag_value,
                        const char* flag, const char* field) {
  if (opt == nullptr || opt->count() == 0) return model_value;
  const std::int64_t v = unwrap(parse_size(flag_value, flag));
  if (v != model_value)
    fail(
        Error{flag, fmt::format("{} contradicts the --model config's {} {}; give one of them", v, field, model_value)});
  return v;
}

}  // namespace

sim::ChunkSolveOptions WorkloadFlags::solve_options() const {
  if (!(solve_ms >= 0)) fail(Error{"--solve-ms", fmt::format("must be >= 0, got {}", solve_ms)});
  sim::ChunkSolveOptions o;
  o.budget_ms = solve_ms;
  o.seed = solve_seed;
  return o;
}

int WorkloadFlags::model_layers() const { return model.empty() ? 0 : int(read_model_config(model).layers); }

ir::Workload WorkloadFlags::get() const {
  ir::Workload w;
  w.batch = unwrap(parse_size(batch, "--batch"));
  w.seq = unwrap(parse_size(seq, "--seq"));
  if (!model.empty()) {
    const ModelConfig m = read_model_config(model);
    w.heads = from_model(m.heads, heads_opt, heads, "--heads", "num_attention_heads");
    w.kv_heads = from_model(m.kv_heads, kv_heads_opt, kv_heads, "--kv-heads", "num_key_value_heads");
    w.head_dim = from_model(m.head_dim, head_dim_opt, head_dim, "--head-dim", "head_dim");
  } else {
    w.heads = unwrap(parse_size(heads, "--heads"));
    w.kv_heads = kv_heads.empty() ? w.heads : unwrap(parse_size(kv_heads, "--kv-heads"));
    w.head_dim = unwrap(parse_size(head_dim, "--head-dim"));
  }
  auto with_flag = [](auto e, const char* flag) {
    if (!e) fail(Error{flag, e.error().what});
    return *e;
  };
  w.dtype = with_flag(ir::parse_dtype(dtype), "--dtype");
  w.layout = with_flag(ir::parse_layout(layout), "--layout");
  w.pass = with_flag(ir::parse_pass(pass), "--pass");
  w.causal = causal;
  if (!mask.empty()) {
    if (auto st = ir::apply_mask(w, mask_from_cu_seqlens(mask)); !st) fail(st.error());
    if (causal && !w.causal) fail(Error{"--mask", "full contradicts --causal; give one of them"});
  }
  return w;
}

// ---- outputs ----

namespace {

namespace fs = std::filesystem;

/// The table an interrupt walks: fixed storage and atomic states, since a signal
/// handler may neither allocate nor lock.
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled in, 2 armed
  bool folder = false;
  char path[PATH_MAX] = {};
};
constexpr int kTempSlots = 64;
TempSlot g_temps[kTempSlots];
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads the slot states");

extern "C" void remove_temps_and_reraise(int sig) {
  // Files first, then the folders they were in (rmdir only removes an empty one).
  for (const bool folders : {false, true})
    for (auto& t : g_temps)
      if (t.state.load() == 2 && t.folder == folders) (void)(folders ? ::rmdir(t.path) : ::unlink(t.path));
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered when the handler returns: the process ends by the signal, as it would have
}

/// What an output path writes to: the path itself, or where its symbolic links lead.
std::string output_target(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(path, ec)) return path;
  // Through a link, the file it leads to is the output, never the link itself: a link that
  // leads nowhere a file can be (/dev/stdout when stdout is a pipe: /proc/self/fd/1 ->
  // "pipe:[N]") is refused, or the rename would replace the link with a regular file.
  const fs::path t = fs::canonical(path, ec);
  if (ec)
    fail(Error{path, "cannot open for writing: it is a symbolic link to a missing file (outputs are regular files)"});
  return t.string();
}

fs::path folder_of(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

/// Errors of open(O_TMPFILE) that only say the file system (or kernel) has no unnamed files.
bool no_unnamed_files(int err) { return err == EOPNOTSUPP || err == EISDIR || err == EINVAL; }

std::atomic<int> g_temp_counter{0};
/// A name beside `target` no other writer uses: this process's id and a count.
std::string temp_name(const std::string& target) {
  return fmt::format("{}.tmp.{}.{}", target, ::getpid(), g_temp_counter++);
}

/// Why a file cannot be created in `dir`, or nothing. An unnamed file tries it
/// for real (root passes access() even where nothing can be created); where the
/// file system has none, a named probe is created and removed at once.
std::string cannot_create_in(const fs::path& dir) {
  if (::access(dir.c_str(), W_OK) != 0) return std::strerror(errno);
#ifdef O_TMPFILE
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  if (fd >= 0) {
    ::close(fd);
    return {};
  }
  if (!no_unnamed_files(errno)) return std::strerror(errno);
#else
  int fd = -1;
#endif
  const std::string probe = (dir / fmt::format(".charm-probe.{}", ::getpid())).string();
  RemoveOnInterrupt guard(probe);
  fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    guard.release();
    return err == EEXIST ? std::string{} : std::strerror(err);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return {};
}

/// Why `target` may not be replaced, or nothing: only a regular file (or nothing) may.
std::string not_replaceable(const std::string& target) {
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0) return {};
  if (S_ISDIR(st.st_mode)) return "it is a folder";
  if (S_ISLNK(st.st_mode)) return "it is a symbolic link to a missing file";
  if (!S_ISREG(st.st_mode)) return fmt::format("it is {} (outputs are regular files)", file_kind(st.st_mode));
  return {};
}

/// Writes all of `content` to `fd`; the errno of the failure, or 0.
int write_all(int fd, const std::string& content) {
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    done += std::size_t(n);
  }
  return 0;
}

/// Gives the unnamed file `fd` the name `name`: 0, or the errno (EEXIST: the name is taken).
int link_unnamed(int fd, const std::string& name) {
  const std::string proc = fmt::format("/proc/self/fd/{}", fd);
  if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return 0;
  const int err = errno;
  if (err == EEXIST) return err;
  // Without /proc, AT_EMPTY_PATH does the same where the process may use it.
  if (::linkat(fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0) return 0;
  return errno == EEXIST ? EEXIST : err;
}

[[noreturn]] void write_failed(const std::string& path, const char* what, int err) {
  fail(Error{path, fmt::format("{}: {}", what, std::strerror(err))});
}

/// Replaces `target` by the file at `tmp` (which an interrupt removes meanwhile).
void rename_over(const std::string& tmp, const std::string& target, const std::string& path) {
  if (const auto why = not_replaceable(target); !why.empty()) {
    ::unlink(tmp.c_str());
    fail(Error{path, "cannot open for writing: " + why});
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    write_failed(path, "cannot write", err);
  }
}

/// The unnamed-file way; false where the system has no unnamed files or cannot link one.
bool write_unnamed(const std::string& path, const std::string& target, const std::string& content) {
#ifndef O_TMPFILE
  (void)path, (void)target, (void)content;
  return false;  // no unnamed files on this platform
#else
  const int fd = ::open(folder_of(target).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) {
    if (no_unnamed_files(errno)) return false;
    write_failed(path, "cannot open for writing", errno);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (const int err = write_all(fd, content); err != 0) write_failed(path, "cannot write", err);
  // A new file appears under its name with all its bytes at once.
  int err = link_unnamed(fd, target);
  if (err == 0) return true;
  if (err != EEXIST) return false;
  // An older file: link under a temporary name, then rename over it (atomic). An
  // interrupt between the two removes the temporary; only SIGKILL in that window
  // of microseconds could leave it.
  const std::string tmp = temp_name(target);
  RemoveOnInterrupt guard(tmp);
  err = link_unnamed(fd, tmp);
  if (err != 0) {
    guard.release();
    if (err == EEXIST) write_failed(path, "cannot write", err);
    return false;
  }
  rename_over(tmp, target, path);
  return true;
#endif
}

/// The named-temporary way: a file beside the target, removed on failure and on interrupt.
void write_named(const std::string& path, const std::string& target, const std::string& content) {
  const std::string tmp = temp_name(target);
  RemoveOnInterrupt guard(tmp);
  const int fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    guard.release();  // not ours to remove, if it exists
    write_failed(path, "cannot open for writing", err);
  }
  int err = write_all(fd, content);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    write_failed(path, "cannot write", err);
  }
  rename_over(tmp, target, path);
}

}  // namespace

RemoveOnInterrupt::RemoveOnInterrupt(const std::string& path, bool folder) {
  if (path.size() >= PATH_MAX) return;
  for (int i = 0; i < kTempSlots; ++i) {
    int free = 0;
    if (!g_temps[i].state.compare_exchange_strong(free, 1)) continue;
    std::memcpy(g_temps[i].path, path.c_str(), path.size() + 1);
    g_temps[i].folder = folder;
    g_temps[i].state.store(2);
    slot_ = i;
    return;
  }
}

void RemoveOnInterrupt::release() {
  if (slot_ >= 0) g_temps[slot_].state.store(0);
  slot_ = -1;
}

void install_interrupt_cleanup() {
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // e.g. under nohup: the parent's choice stands
    struct sigaction sa {};
    sa.sa_handler = remove_temps_and_reraise;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

void check_output_path(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  const std::string target = output_target(path);
  const fs::path dir = folder_of(target);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(Error{flag, fmt::format("{}: cannot open for writing: folder '{}' does not exist", path, dir.string())});
  if (const auto why = not_replaceable(target); !why.empty())
    fail(Error{flag, fmt::format("{}: cannot open for writing: {}", path, why)});
  if (const auto why = cannot_create_in(dir); !why.empty())
    fail(Error{flag,
               fmt::format("{}: cannot open for writing: folder '{}' is not writable: {}", path, dir.string(), why)});
}

namespace {

/// A file as a command names it, and what identifies it: its normalized absolute path
/// (symbolic links resolved) and, where it exists, its device and inode (hard links).
struct FileId {
  std::string flag, path, canonical;
  bool exists = false;
  struct stat st {};
  [[nodiscard]] bool same(const FileId& o) const {
    return canonical == o.canonical || (exists && o.exists && st.st_dev == o.st.st_dev && st.st_ino == o.st.st_ino);
  }
};

FileId file_id(const std::string& flag, const std::string& path, const std::string& target) {
  std::error_code ec;
  FileId id{flag, path, fs::weakly_canonical(fs::absolute(target, ec), ec).string(), false, {}};
  if (ec) id.canonical = fs::path(target).lexically_normal().string();
  id.exists = ::stat(target.c_str(), &id.st) == 0;
  return id;
}

/// The outputs seen so far, found by path and by inode in constant time: an export of many
/// ranks checks one file per rank.
class WrittenFiles {
 public:
  [[nodiscard]] const FileId* find(const FileId& f) const {
    if (const auto it = by_path_.find(f.canonical); it != by_path_.end()) return &files_[it->second];
    if (!f.exists) return nullptr;
    const auto it = by_inode_.find({f.st.st_dev, f.st.st_ino});
    return it == by_inode_.end() ? nullptr : &files_[it->second];
  }
  void add(FileId f) {
    by_path_.emplace(f.canonical, files_.size());
    if (f.exists) by_inode_.emplace(std::pair{f.st.st_dev, f.st.st_ino}, files_.size());
    files_.push_back(std::move(f));
  }

 private:
  std::vector<FileId> files_;
  std::unordered_map<std::string, std::size_t> by_path_;
  std::map<std::pair<dev_t, ino_t>, std::size_t> by_inode_;
};

}  // namespace

void check_output_paths(const FlagPaths& outputs) { check_command_files({{}, outputs, {}}); }

void check_command_files(const CommandFiles& files) {
  WrittenFiles written;
  auto add_output = [&written](const std::string& flag, const std::string& path) {
    FileId s = file_id(flag, path, output_target(path));
    if (const FileId* e = written.find(s))
      fail(Error{flag,
                 fmt::format("{}: is also the {} output ({}); give each output its own file", path, e->flag, e->path)});
    written.add(std::move(s));
  };
  for (const auto& [flag, path] : files.outputs) {
    if (path.empty()) continue;
    check_output_path(path, flag);
    add_output(flag, path);
  }
  for (const auto& f : files.folders) {
    if (f.path.empty()) continue;
    check_output_dir(f.path, f.flag);
    for (const auto& name : f.names) add_output(f.flag, (fs::path(f.path) / name).string());
  }
  for (const auto& [flag, path] : files.inputs) {
    if (path.empty()) continue;
    if (const FileId* out = written.find(file_id(flag, path, path)))
      fail(Error{out->flag, fmt::format("{}: is also the {} input ({}); an output may not replace what the command "
                                        "reads",
                                        out->path, flag, path)});
  }
}

void check_output_dir(const std::string& dir, const std::string& flag) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::path p = dir;
  struct stat st {};
  if (::stat(p.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) fail(Error{flag, fmt::format("cannot create {}: {}", dir, std::strerror(ENOTDIR))});
  } else {
    // The nearest folder that exists is where the missing ones will be made.
    p = fs::absolute(p, ec).lexically_normal();
    while (p.has_parent_path() && p != p.parent_path() && ::stat(p.c_str(), &st) != 0) p = p.parent_path();
    if (!S_ISDIR(st.st_mode)) fail(Error{flag, fmt::format("cannot create {}: {} is not a folder", dir, p.string())});
  }
  if (const auto why = cannot_create_in(p); !why.empty())
    fail(Error{flag, fmt::format("cannot write into {}: folder '{}' is not writable: {}", dir, p.string(), why)});
}

void write_file_atomic(const std::string& path, const std::string& content, Temporary how) {
  const std::string target = output_target(path);
  if (const auto why = not_replaceable(target); !why.empty()) fail(Error{path, "cannot open for writing: " + why});
  if (how == Temporary::Named || !write_unnamed(path, target, content)) write_named(path, target, content);
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
  for (auto [rank_var, size_var] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                    std::pair{"PMI_RANK", "PMI_SIZE"}, std::pair{"PMIX_RANK", "PMIX_SIZE"}}) {
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

EarlyFailure& early_failure_handler() {
  static EarlyFailure handler;
  return handler;
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
}  // namespace

void add_max_memory(CLI::App& app) {
  app.add_option(
      "--max-memory", max_memory_text(),
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

std::string memory_budget_name() {
  return max_memory_text().empty() ? "half of this machine's memory" : "--max-memory";
}

void check_budget(double bytes, const std::string& what, const std::string& flag) {
  const double budget = memory_budget_bytes();
  if (bytes <= budget) return;
  fail(Error{flag, sched::over_budget_text(what, bytes, budget, memory_budget_name())});
}

void check_plan_file_budget(const std::string& path, const std::string& flag) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return;  // the loader says what is wrong with the path
  // A plan file holds about 270 bytes of text an op (measured: a 64-rank ring, 12,160 ops in 3.3 MB); reading
  // one takes the text, nlohmann's tree and the plan, about 2 kB an op in all (the JSON copy charm plan
  // budgets), and a simulation of it kSimBytesPerOp more.
  const double ops = double(size) / 270;
  check_budget(ops * (2000 + sched::kSimBytesPerOp),
               fmt::format("reading the plan file {} ({:.3g} MB, about {:.2g} ops)", path, double(size) / 1e6, ops),
               flag);
}

void check_plan_budget(const sched::PlanRequest& req, double extra_bytes_per_op, const std::string& what,
                       const ir::RankSymmetry& quotient) {
  if (!quotient.active()) {
    const auto e = sched::estimate_plan(req);
    check_budget(e.plan_bytes + extra_bytes_per_op * e.ops,
                 fmt::format("{} ({} on {} ranks: about {:.2g} ops)", what, req.algo, req.ranks, e.ops), "--ranks");
    return;
  }
  // The planner still describes every rank: its buffers on the other ranks (phantoms) are the bulk.
  const auto e = sched::estimate_quotient_plan(req, quotient);
  check_budget(e.plan_bytes + extra_bytes_per_op * e.ops,
               fmt::format("{} of one class of {} rank{} ({} on {} ranks: about {:.2g} ops, and {:.2g} buffers of the "
                           "other ranks)",
                           what, quotient.block, quotient.block == 1 ? "" : "s", req.algo, req.ranks, e.ops,
                           e.phantom_buffers),
               "--ranks");
}

ProgressLine::ProgressLine(bool enabled)
    : enabled_(enabled), tty_(::isatty(STDERR_FILENO) != 0),
      t0_(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count()) {}

double ProgressLine::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - t0_;
}

bool ProgressLine::due() {
  const double el = elapsed();
  if (el < 1.0 || el - last_ < (tty_ ? 0.1 : 5.0)) return false;
  last_ = el;
  return true;
}

void ProgressLine::draw(const std::string& line) {
  if (tty_)
    std::fprintf(stderr, "\r%-100s", line.c_str());
  else
    std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  if (drawn_ && tty_) std::fputs("\n", stderr);
  drawn_ = false;
}

}  // namespace charm::cli
