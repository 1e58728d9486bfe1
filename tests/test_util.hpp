#pragma once
// Helpers shared by tests: run the charm CLI and capture its output and exit code.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

namespace charm::test {

struct CmdResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

inline CmdResult run_cmd(const std::string& cmd) {
  CmdResult r;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  const int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline CmdResult run_charm(const std::string& args) { return run_cmd(std::string(CHARM_BIN) + " " + args); }

/// This test process's scratch directory, TempDir()/charm_<pid>: made on first use, and removed with
/// everything in it when the process exits (by the process that made it, not by a forked child).
inline const std::string& temp_dir() {
  struct Scratch {
    pid_t owner = ::getpid();
    std::string path = std::string(::testing::TempDir()) + "charm_" + std::to_string(owner);
    Scratch() { std::filesystem::create_directories(path); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    ~Scratch() {
      std::error_code ec;
      if (::getpid() == owner) std::filesystem::remove_all(path, ec);
    }
  };
  static const Scratch scratch;
  return scratch.path;
}

/// A file (or directory) name in temp_dir().
inline std::string temp_path(const std::string& name) { return temp_dir() + "/" + name; }

/// A file's whole text ("" when it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

}  // namespace charm::test
