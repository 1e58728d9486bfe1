#pragma once
// What the command line and the Python module share beyond the application layer, without CLI11: the one error
// path (UsageError, exit code 2 for bad input; RuntimeFailure, 3), the warning line, the mpirun job this process is
// in, the memory budget of work before it starts, atomic output files and their checks, and the progress line
// of long work.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/planners/estimate.hpp"
#include "support/expected.hpp"

namespace charm::cli {

inline constexpr int kExitInvalid = 1;  // a plan that fails validation / a check that fails
inline constexpr int kExitUsage = 2;    // bad input: flags, files, values
inline constexpr int kExitRuntime = 3;  // a stall, an MPI/CUDA/NCCL failure

/// Thrown inside a subcommand to leave through the single error path.
struct UsageError {
  Error error;
};
[[noreturn]] void fail(Error e);
/// The command's warning line on stderr, "charm: warning: <what>": something to know; the work goes on.
void print_warning(const std::string& what);
/// Thrown for runtime failures (exit code 3): a stall, an MPI/CUDA/NCCL error.
struct RuntimeFailure {
  std::string message;
};
/// Ends the command with `code`, its message already printed (or left to another rank of an mpirun job).
struct QuietExit {
  int code = 0;
};
/// The exit code a subcommand leaves for main (0 unless set).
int& exit_code();
template <class T>
T unwrap(Expected<T> e) {
  if (!e) fail(e.error());
  return std::move(e).value();
}
inline void unwrap(const Status& s) {
  if (!s) fail(s.error());
}

/// The process's place in a job started by mpirun (Open MPI's or MPICH's launcher
/// environment), read before MPI is initialised; nullopt outside such a job.
struct LaunchedJob {
  int rank = 0, size = 1;
};
[[nodiscard]] std::optional<LaunchedJob> launched_job();
/// True in every process of a launched job but the first.
[[nodiscard]] bool quiet_rank();

/// Under mpirun, a failure of `run` that one process finds before the processes agreed on
/// anything (a flag, a path; main's handlers call this) must neither be lost nor said by
/// every rank. Where MPI is built, cmd_run sets this handler: the process joins the
/// agreement the others hold on their plan, rank 0 says the lowest failing rank's line
/// (flushed before any process exits), and the agreed exit code comes back. nullopt where no
/// agreement can be had (MPI already started in this process): the process says its own line.
using EarlyFailure = std::function<std::optional<int>(const Error& error, int code)>;
EarlyFailure& early_failure_handler();

/// Work that would not fit is refused before it starts, with its estimate: the budget is
/// --max-memory (commands that build plans take it) or half of this machine's memory.
/// The budget as the layers below take it (sched::MemoryBudget: its bytes and its name) from --max-memory's
/// `text`: empty, half of this machine's memory ("half of this machine's memory"); else the size given
/// ("--max-memory"), at least 1M.
[[nodiscard]] sched::MemoryBudget memory_budget(const std::string& text);
/// Fails naming `flag` when `bytes` (an estimate of `what`) exceeds `budget`.
void check_budget(const sched::MemoryBudget& budget, double bytes, const std::string& what, const std::string& flag);
/// check_budget for reading the plan file at `path` (estimated from its size), before it is read.
void check_plan_file_budget(const sched::MemoryBudget& budget, const std::string& path, const std::string& flag);

/// Fails now, before any work or any other output, when `path` cannot be written:
/// its folder is missing or not writable, or the path names anything but a
/// regular file (a folder, a device like /dev/full, a FIFO). A symbolic link is
/// judged by what it points to, which is what gets written. `flag` names the option.
void check_output_path(const std::string& path, const std::string& flag);

/// (flag, path) pairs; an empty path is a flag not given.
using FlagPaths = std::vector<std::pair<std::string, std::string>>;

/// check_output_path for each (flag, path) with a path, and then that no two name
/// one file (the same path, through a symbolic link, or as hard links): the
/// second write would silently replace the first.
void check_output_paths(const FlagPaths& outputs);

/// Every file a command reads and writes, for check_command_files.
struct CommandFiles {
  FlagPaths inputs;   // files read (a topology, a plan, a log)
  FlagPaths outputs;  // files written (replaced whole)
  /// A folder the command writes files of these names into (run --dump): the folder may not
  /// exist yet; each of its files is an output like the others.
  struct Folder {
    std::string flag, path;
    std::vector<std::string> names;
  };
  std::vector<Folder> folders;
};

/// The one check of a command's paths, before any work: check_output_paths on the
/// outputs (and the folders' files), check_output_dir on the folders, and then that
/// no output names an input (the same path, through a symbolic link, or a hard link
/// to it): an output never replaces what the command reads. Fails naming both flags.
void check_command_files(const CommandFiles& files);

/// Fails now when `dir` cannot become a folder of outputs: it exists and is not a
/// folder, or it (or, when missing, the nearest folder above it) is not writable.
/// Creates nothing.
void check_output_dir(const std::string& dir, const std::string& flag);

/// Writes `content` to `path` (a regular file, or a symbolic link to where one may
/// be) so that it appears whole or not at all: the bytes go to an unnamed file
/// (O_TMPFILE) that is linked in place once complete, so even SIGKILL leaves
/// nothing behind; an older file is replaced by a rename. Where the file system
/// has no unnamed files, a named temporary is used, and SIGINT or SIGTERM
/// removes it (install_interrupt_cleanup). Messages carry the errno text.
enum class Temporary : std::uint8_t {
  Auto,   // unnamed where the file system has unnamed files, else named
  Named,  // always named (the fallback, chosen by tests)
};
void write_file_atomic(const std::string& path, const std::string& content, Temporary how = Temporary::Auto);

/// SIGINT and SIGTERM remove the temporaries this process has registered
/// (RemoveOnInterrupt), then end it by the same signal. Called once, from main;
/// a signal the parent set to be ignored stays ignored.
void install_interrupt_cleanup();

/// One line of progress on stderr for work that may take long: nothing in its first second, then
/// redrawn in place at most ten times a second on a terminal, or written as a line of its own every
/// five seconds elsewhere (a log). update() formats the line only when it is due.
class ProgressLine {
 public:
  /// `enabled` false: nothing is drawn (a command whose output the line would disturb, unless asked).
  explicit ProgressLine(bool enabled = true);
  template <class MakeLine>
  void update(MakeLine&& make_line) {
    if (enabled_ && due()) draw(make_line());
  }
  /// Seconds since the line was made.
  [[nodiscard]] double elapsed() const;
  /// Ends a line drawn in place.
  void finish();

 private:
  [[nodiscard]] bool due();
  void draw(const std::string& line);
  bool enabled_;
  bool tty_;
  bool drawn_ = false;
  double last_ = 0;
  double t0_;
};

/// While alive, an interrupt (see install_interrupt_cleanup) removes `path`: a
/// temporary file, a file of an unfinished set of outputs, or (folder) an empty
/// folder made for them. Best effort: past 64 at once, or for paths longer
/// than PATH_MAX, nothing is registered.
class RemoveOnInterrupt {
 public:
  explicit RemoveOnInterrupt(const std::string& path, bool folder = false);
  ~RemoveOnInterrupt() { release(); }
  RemoveOnInterrupt(const RemoveOnInterrupt&) = delete;
  RemoveOnInterrupt& operator=(const RemoveOnInterrupt&) = delete;
  /// Keeps the path from now on (it is finished, or already gone).
  void release();

 private:
  int slot_ = -1;
};

}  // namespace charm::cli
