#pragma once
// Helpers shared by tests: run the charm CLI and capture its output and exit code.

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

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

inline std::string temp_path(const std::string& name) {
  return std::string(::testing::TempDir()) + "charm_" + std::to_string(::getpid()) + "_" + name;
}

}  // namespace charm::test
