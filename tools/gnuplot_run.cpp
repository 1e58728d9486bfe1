#include "tools/gnuplot_run.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "tools/cli_common.hpp"

extern char** environ;

namespace charm::cli {
namespace {

namespace fs = std::filesystem;

/// A folder of this process's own under the temporary folder, with the files in it: removed
/// when it goes out of scope, and by SIGINT or SIGTERM before then (RemoveOnInterrupt).
class Scratch {
 public:
  Scratch() {
    std::error_code ec;
    std::string dir = (fs::temp_directory_path(ec) / "charm-plot.XXXXXX").string();
    if (ec || ::mkdtemp(dir.data()) == nullptr)
      throw RuntimeFailure{fmt::format("--plot: cannot make a temporary folder for gnuplot: {}", std::strerror(errno))};
    dir_ = dir;
    folder_guard_ = std::make_unique<RemoveOnInterrupt>(dir_, true);
    for (const char* name : {"plot.gp", "plot.log", "plot.img"})
      file_guards_.push_back(std::make_unique<RemoveOnInterrupt>(file(name)));
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  [[nodiscard]] std::string file(const char* name) const { return (fs::path(dir_) / name).string(); }

 private:
  std::string dir_;
  std::unique_ptr<RemoveOnInterrupt> folder_guard_;
  std::vector<std::unique_ptr<RemoveOnInterrupt>> file_guards_;
};

std::string read_bytes(const std::string& path, std::size_t limit = std::string::npos) {
  std::ifstream in(path, std::ios::binary);
  std::string s;
  char buf[1 << 16];
  while (s.size() < limit && in.read(buf, sizeof buf).gcount() > 0) s.append(buf, std::size_t(in.gcount()));
  return s.size() > limit ? s.substr(0, limit) : s;
}

/// Waits for `pid` until it ends, the deadline passes or `cancel` is set; kills it then.
/// Returns its exit status, or -1 when it was killed.
int wait_bounded(pid_t pid, double timeout_s, const std::atomic<bool>& cancel) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int st = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0 && errno != EINTR) return -1;
    if (cancel.load() || (timeout_s > 0 && std::chrono::steady_clock::now() >= deadline)) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

Drawing draw_with_gnuplot(const std::string& gnuplot, const std::string& script, double timeout_s,
                          const std::atomic<bool>& cancel) {
  const Scratch scratch;
  const std::string gp = scratch.file("plot.gp"), log = scratch.file("plot.log"), img = scratch.file("plot.img");
  std::ofstream(gp, std::ios::binary) << script;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, img.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string a0 = gnuplot, a1 = gp;
  char* argv[] = {a0.data(), a1.data(), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, gnuplot.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (spawned != 0) return {{}, fmt::format("gnuplot could not start: {}", std::strerror(spawned))};
  const int rc = wait_bounded(pid, timeout_s, cancel);
  if (cancel.load()) return {{}, "interrupted"};
  if (rc < 0) return {{}, fmt::format("gnuplot did not finish within {:g} s (--timeout-s) and was stopped", timeout_s)};
  Drawing d;
  d.image = read_bytes(img);
  if (rc != 0 || d.image.empty()) return {{}, fmt::format("gnuplot failed (exit {}):\n{}", rc, read_bytes(log, 2000))};
  return d;
}

}  // namespace charm::cli
