#include "support/input_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace charm {

std::string_view file_kind(unsigned mode) {
  switch (mode & S_IFMT) {
  case S_IFREG:
    return "a regular file";
  case S_IFDIR:
    return "a folder";
  case S_IFIFO:
    return "a FIFO";
  case S_IFCHR:
    return "a character device";
  case S_IFBLK:
    return "a block device";
  case S_IFSOCK:
    return "a socket";
  case S_IFLNK:
    return "a symbolic link";
  default:
    return "not a regular file";
  }
}

namespace {

/// Why a file of this mode and size is not read, or nothing.
std::string refusal(const struct stat& st, std::string_view what) {
  if (S_ISDIR(st.st_mode)) return fmt::format("is a folder, not {}", what);
  if (!S_ISREG(st.st_mode)) return fmt::format("is {}, not {} (inputs are regular files)", file_kind(st.st_mode), what);
  if (std::uint64_t(st.st_size) > kMaxInputBytes)
    return fmt::format("is {} bytes; inputs are at most {} bytes (1 GiB)", std::uint64_t(st.st_size), kMaxInputBytes);
  return {};
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Expected<std::string> read_input_file(const std::string& path, std::string_view what, std::string_view cannot_open) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Error{path, fmt::format("{}: {}", cannot_open, std::strerror(errno))};
  if (auto why = refusal(st, what); !why.empty()) return Error{path, why};
  // Non-blocking: should a FIFO take the file's place after the stat, the open still returns.
  Fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (f.fd < 0) return Error{path, fmt::format("{}: {}", cannot_open, std::strerror(errno))};
  if (::fstat(f.fd, &st) != 0) return Error{path, fmt::format("cannot read: {}", std::strerror(errno))};
  if (auto why = refusal(st, what); !why.empty()) return Error{path, why};
  std::string text;
  text.reserve(std::size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{path, fmt::format("cannot read: {}", std::strerror(errno))};
    }
    if (n == 0) break;
    // A file may grow while it is read (or, under /proc, report no size at all).
    if (text.size() + std::size_t(n) > kMaxInputBytes)
      return Error{path, fmt::format("holds more than {} bytes; inputs are at most 1 GiB", kMaxInputBytes)};
    text.append(buf, std::size_t(n));
  }
  return text;
}

}  // namespace charm
