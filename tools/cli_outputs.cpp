// Atomic output files, the checks of a command's paths, and the removal of temporaries on SIGINT and SIGTERM.
#include "tools/cli_support.hpp"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "support/input_file.hpp"

namespace charm::cli {

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

}  // namespace charm::cli
