// `charm`: the command line. Thin: parses flags, calls the libraries, prints.
// Each subcommand lives in its own cmd_*.cpp and registers itself.

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <streambuf>
#include <string>
#include <vector>

#include "support/suggest.hpp"
#include "tools/cli_common.hpp"

namespace charm::cli {
/// "charm 0.1.0 (commit ..., Release build, CUDA backend built)" (tools/version.cpp).
std::string version_text();
}  // namespace charm::cli

namespace {

/// An error's text as one line: a control character (from a file name, a flag's value or a
/// plan's text) is written as an escape, so that it neither breaks the line nor drives the terminal.
std::string one_line(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

void say_error(const std::string& what) {
  std::fprintf(stderr, "charm: error: %s\n", one_line(what).c_str());
  std::fflush(stderr);
}

/// CLI11's "The following argument(s) was/were not expected: --seqq 4k", with the
/// nearest flag of the command each unknown flag was given to.
std::string with_suggestions(const std::string& what, const CLI::App& app) {
  const auto colon = what.find("not expected: ");
  if (colon == std::string::npos) return what;
  std::vector<std::string> flags;
  const CLI::App* cmd = &app;
  for (const auto* sub : app.get_subcommands()) cmd = sub;
  for (const auto* opt : cmd->get_options()) {
    for (const auto& l : opt->get_lnames()) flags.push_back("--" + l);
    for (const auto& sn : opt->get_snames()) flags.push_back("-" + sn);
  }
  std::string out = what;
  std::string rest = what.substr(colon + 14);
  for (std::size_t p = 0; p < rest.size();) {
    std::size_t q = rest.find(' ', p);
    if (q == std::string::npos) q = rest.size();
    std::string arg = rest.substr(p, q - p);
    p = q + 1;
    if (arg.size() < 2 || arg[0] != '-') continue;
    if (const auto eq = arg.find('='); eq != std::string::npos) arg.resize(eq);
    if (const auto c = charm::closest_name(arg, flags)) {
      out += fmt::format(" (did you mean '{}'?)", *c);
      break;
    }
  }
  return out;
}

// ---- stdout: every byte written is checked ----
//
// stdio forgets why a write failed (a later fflush succeeds on the emptied buffer, and errno is
// long overwritten), so stdout is replaced by a stream whose writes go to file descriptor 1
// here, keeping the first error; std::cout writes into it too. finish_stdout() turns a
// failed write or close into the command's failure.

int g_stdout_errno = 0;

ssize_t write_fd1(void* /*cookie*/, const char* buf, std::size_t n) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t w = ::write(STDOUT_FILENO, buf + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (g_stdout_errno == 0) g_stdout_errno = w < 0 ? errno : EIO;
      return done > 0 ? ssize_t(done) : -1;
    }
    done += std::size_t(w);
  }
  return ssize_t(n);
}

/// Closes file descriptor 1 (a close can be where a write's failure shows, on NFS say) and puts
/// /dev/null there, so that the next file opened does not take it and a late write goes nowhere.
/// Ok, or -1 with the first error kept.
int close_fd1() {
  // EBADF: stdout was closed to begin with; a write would have said so.
  const bool closed = ::close(STDOUT_FILENO) == 0 || errno == EINTR || errno == EBADF;
  if (!closed && g_stdout_errno == 0) g_stdout_errno = errno;
  const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (fd >= 0 && fd != STDOUT_FILENO) {
    (void)::dup2(fd, STDOUT_FILENO);
    ::close(fd);
  }
  return closed ? 0 : -1;
}

/// std::cout's buffer: every character to the C stream stdout (which buffers it).
class StdoutBuf final : public std::streambuf {
 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    return std::fputc(traits_type::to_char_type(c), stdout) == EOF ? traits_type::eof() : c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    return std::streamsize(std::fwrite(s, 1, std::size_t(n), stdout));
  }
  int sync() override { return std::fflush(stdout) == 0 ? 0 : -1; }
};

/// The checked stream is never closed, so never freed: a library may hold the FILE* it found in
/// `stdout` and flush it while the process exits (on an H100 machine cuBLASLt's exit handler
/// did, and 3 `run --backend cuda-local` processes in 30 aborted after their answer, "glibc detected
/// an invalid stdio handle", when finish_stdout closed the stream with fclose).
void install_checked_stdout() {
  static StdoutBuf buf;
  FILE* f = ::fopencookie(nullptr, "w", cookie_io_functions_t{nullptr, write_fd1, nullptr, nullptr});
  if (f == nullptr) return;  // stdout stays as it was
  // As stdio does for stdout: line by line on a terminal, in blocks otherwise.
  std::setvbuf(f, nullptr, ::isatty(STDOUT_FILENO) != 0 ? _IOLBF : _IOFBF, BUFSIZ);
  stdout = f;
  std::cout.rdbuf(&buf);
}

/// The exit code once stdout is flushed and its descriptor closed: `code`, or exit 2 with the reason
/// where a byte of the answer (exit 0, or 1 for a verdict) could not be written. A command
/// that failed otherwise has said its one line already.
int finish_stdout(int code) {
  std::cout.flush();
  const bool failed = std::fflush(stdout) != 0 || std::ferror(stdout) != 0 || !std::cout.good() || close_fd1() != 0 ||
                      g_stdout_errno != 0;
  if (!failed || (code != 0 && code != charm::cli::kExitInvalid)) return code;
  std::fprintf(stderr, "charm: error: stdout: %s\n", std::strerror(g_stdout_errno != 0 ? g_stdout_errno : EIO));
  return charm::cli::kExitUsage;
}

/// A usage error's one line and exit code. Under mpirun the processes of `run` and `sweep` agree on it
/// first (early_failure_handler), so that it is said once however many ranks found it;
/// otherwise the process that found it says it: a line is never left unsaid.
int usage_failure(const charm::Error& e, int argc, char** argv) {
  const auto job = charm::cli::launched_job();
  auto& agree = charm::cli::early_failure_handler();
  const bool job_command = argc > 1 && (std::string(argv[1]) == "run" || std::string(argv[1]) == "sweep");
  if (job && job->size > 1 && job_command && agree)
    if (const auto code = agree(e, charm::cli::kExitUsage)) return *code;
  say_error(e.message());
  return charm::cli::kExitUsage;
}

int run_command(int argc, char** argv) {
  // An interrupt removes the temporaries of the output being written (cli_common.hpp).
  charm::cli::install_interrupt_cleanup();
  // The program's name, "charm", is the tool's, not the algorithm's.
  CLI::App app{"charm: plan, validate, simulate and run distributed attention (CHARM+, RM+, Ring, ...)",
               "charm"};  // not the algorithm
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "all subcommands' help");
  app.set_version_flag("--version", charm::cli::version_text());
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::printf("%s\n", charm::cli::version_text().c_str());
    return 0;
  }
  // The subcommand named, alone where it is one (the others' options cost a start their setup for nothing).
  const auto& all = charm::cli::registry();
  const bool help_all =
      std::any_of(argv + 1, argv + argc, [](const char* a) { return std::strcmp(a, "--help-all") == 0; });
  const auto named =
      help_all || argc < 2
          ? all.end()
          : std::find_if(all.begin(), all.end(), [&](const charm::cli::Registration& r) { return r.name == argv[1]; });
  for (const auto& r : all)
    if (named == all.end() || &r == &*named) r.add(app);
  charm::cli::apply_number_grammar(app);
  // CLI11 would say only "A subcommand is required" for a mistyped one.
  const auto subs = app.get_subcommands([](const CLI::App*) { return true; });
  if (argc > 1 && argv[1][0] != '-' &&
      std::none_of(subs.begin(), subs.end(), [&](const CLI::App* sub) { return sub->check_name(argv[1]); })) {
    std::string names;
    for (const auto* sub : subs) names += fmt::format("{}{}", names.empty() ? "" : ", ", sub->get_name());
    say_error(fmt::format("unknown command '{}' (expected one of: {})", argv[1], names));
    return charm::cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.empty()) what = e.get_name();
    return usage_failure(charm::Error{"", with_suggestions(what, app)}, argc, argv);
  } catch (const charm::cli::UsageError& e) {
    return usage_failure(e.error, argc, argv);
  } catch (const charm::cli::QuietExit& e) {
    return e.code;
  } catch (const charm::cli::RuntimeFailure& e) {
    say_error(e.message);
    return charm::cli::kExitRuntime;
  } catch (const std::bad_alloc&) {
    // A workload too large for this machine's memory: a runtime failure, not a crash.
    std::fprintf(stderr, "charm: error: out of memory\n");
    return charm::cli::kExitRuntime;
  } catch (const std::exception& e) {
    // Not expected: every input error travels as a charm::Error. One line, never std::terminate's.
    say_error(std::string("internal: ") + e.what());
    return charm::cli::kExitRuntime;
  }
  return charm::cli::exit_code();
}

/// Memory held back for the way out of an allocation that fails. The first failure, on any thread,
/// hands it back before std::bad_alloc is thrown, so that the destructors that run as the exception
/// travels (some allocate) and the one line said at the end find room instead of std::terminate.
/// A mapping of its own, never touched: it costs address space (what a `ulimit -v` counts), no
/// pages. Not a heap block: under AddressSanitizer that would be filled at start and scanned for
/// pointers by LeakSanitizer at every exit (64 MiB each time, about a quarter of a second).
std::atomic<void*> g_reserve{nullptr};
constexpr std::size_t kReserveBytes = std::size_t{64} << 20;

void on_allocation_failure() {
  if (void* p = g_reserve.exchange(nullptr)) munmap(p, kReserveBytes);
  throw std::bad_alloc();
}

void hold_reserve() {
  void* p = mmap(nullptr, kReserveBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p != MAP_FAILED) g_reserve.store(p);
}

}  // namespace

int main(int argc, char** argv) {
  hold_reserve();
  std::set_new_handler(on_allocation_failure);
  install_checked_stdout();
  return finish_stdout(run_command(argc, argv));
}
