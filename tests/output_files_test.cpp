// Output files: written whole or not at all, only over regular files, and no
// temporary left behind by an interrupt (SIGINT, SIGTERM) or, where unnamed
// files exist, even by SIGKILL (tools/cli_common.hpp).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.hpp"
#include "tools/cli_common.hpp"

namespace charm::test {
namespace {

namespace fs = std::filesystem;
using cli::Temporary;

class OutputFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path(std::string("out_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  [[nodiscard]] std::string at(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  [[nodiscard]] std::vector<std::string> entries() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  /// Whether the test folder's file system has unnamed files (O_TMPFILE).
  [[nodiscard]] bool has_unnamed_files() const {
    const int fd = ::open(dir_.c_str(), O_TMPFILE | O_WRONLY, 0600);
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }
  std::string dir_;
};

/// The message of the UsageError `f` throws ("" if it throws none).
template <class F>
std::string usage_error(F&& f) {
  try {
    f();
  } catch (const cli::UsageError& e) {
    return e.error.message();
  }
  return {};
}

TEST_F(OutputFiles, WritesAndReplaces) {
  for (const auto how : {Temporary::Auto, Temporary::Named}) {
    cli::write_file_atomic(at("a.json"), "one", how);
    EXPECT_EQ(read(at("a.json")), "one");
    cli::write_file_atomic(at("a.json"), "two", how);
    EXPECT_EQ(read(at("a.json")), "two");
    EXPECT_EQ(entries(), std::vector<std::string>{"a.json"});
  }
}

TEST_F(OutputFiles, WritesThroughASymbolicLinkAndKeepsIt) {
  cli::write_file_atomic(at("real.json"), "old");
  fs::create_symlink("real.json", at("link.json"));
  cli::write_file_atomic(at("link.json"), "new");
  EXPECT_TRUE(fs::is_symlink(at("link.json")));
  EXPECT_EQ(read(at("real.json")), "new");
}

TEST_F(OutputFiles, NeverReplacesAFifoAFolderOrADanglingLink) {
  ASSERT_EQ(::mkfifo(at("fifo").c_str(), 0600), 0);
  fs::create_directory(at("folder"));
  fs::create_symlink("missing.json", at("dangling.json"));
  for (const auto how : {Temporary::Auto, Temporary::Named}) {
    EXPECT_NE(usage_error([&] { cli::write_file_atomic(at("fifo"), "x", how); }).find("it is a FIFO"),
              std::string::npos);
    EXPECT_NE(usage_error([&] { cli::write_file_atomic(at("folder"), "x", how); }).find("it is a folder"),
              std::string::npos);
    EXPECT_NE(usage_error([&] {
                cli::write_file_atomic(at("dangling.json"), "x", how);
              }).find("symbolic link to a missing file"),
              std::string::npos);
  }
  EXPECT_TRUE(fs::is_fifo(at("fifo")));
  EXPECT_TRUE(fs::is_directory(at("folder")));
  EXPECT_EQ(entries(), (std::vector<std::string>{"dangling.json", "fifo", "folder"}));
  // And the check before any work says the same.
  EXPECT_NE(usage_error([&] { cli::check_output_path(at("fifo"), "--out"); }).find("--out: "), std::string::npos);
  EXPECT_NE(usage_error([&] { cli::check_output_path("/dev/zero", "--out"); }).find("it is a character device"),
            std::string::npos);
}

TEST_F(OutputFiles, TwoOutputsNamingOneFileAreRefused) {
  cli::write_file_atomic(at("a.json"), "a");
  fs::create_hard_link(at("a.json"), at("hard.json"));
  fs::create_symlink("a.json", at("soft.json"));
  const std::string rel = fs::relative(at("a.json")).string();
  for (const std::string& other : {at("a.json"), at("hard.json"), at("soft.json"), at("./a.json"), rel})
    EXPECT_NE(usage_error([&] {
                cli::check_output_paths({{"--out", at("a.json")}, {"--dot", other}});
              }).find("--dot: "),
              std::string::npos)
        << other;
  EXPECT_EQ(usage_error([&] {
              cli::check_output_paths({{"--out", at("a.json")}, {"--dot", at("b.json")}, {"--listing", ""}});
            }),
            "");
}

TEST_F(OutputFiles, NoOutputMayNameAnInput) {
  cli::write_file_atomic(at("plan.json"), "plan");
  fs::create_hard_link(at("plan.json"), at("hard.json"));
  fs::create_symlink("plan.json", at("soft.json"));
  fs::create_directory(at("dump"));
  cli::write_file_atomic(at("dump/meta.json"), "plan");
  const std::string rel = fs::relative(at("plan.json")).string();
  for (const std::string& out : {at("plan.json"), at("hard.json"), at("soft.json"), at("./plan.json"), rel}) {
    const auto why = usage_error([&] {
      cli::check_command_files({{{"--plan", at("plan.json")}}, {{"--trace", out}}, {}});
    });
    EXPECT_EQ(why.rfind("--trace: " + out + ": is also the --plan input", 0), 0u) << why;
  }
  // A folder's files are outputs too: the plan, or another output, may not be one of them.
  const cli::CommandFiles::Folder dump{"--dump", at("dump"), {"q.npy", "meta.json"}};
  EXPECT_NE(usage_error([&] {
              cli::check_command_files({{{"--plan", at("dump/meta.json")}}, {}, {dump}});
            }).find("--dump: " + at("dump/meta.json") + ": is also the --plan input"),
            std::string::npos);
  EXPECT_NE(usage_error([&] {
              cli::check_command_files({{}, {{"--trace", at("dump/q.npy")}}, {dump}});
            }).find("is also the --trace output"),
            std::string::npos);
  // Beside them, anything goes; the inputs and the folder are left as they were.
  EXPECT_EQ(usage_error([&] {
              cli::check_command_files(
                  {{{"--plan", at("plan.json")}, {"--topology", ""}}, {{"--trace", at("t.json")}}, {dump}});
            }),
            "");
  EXPECT_EQ(usage_error([&] { cli::check_command_files({{{"--plan", at("dump/other.json")}}, {}, {dump}}); }), "");
  EXPECT_EQ(read(at("plan.json")), "plan");
  EXPECT_EQ(entries(), (std::vector<std::string>{"dump", "hard.json", "plan.json", "soft.json"}));
}

/// Forks a child that writes `bytes` bytes to `path` (after installing the interrupt cleanup) and exits 0.
pid_t spawn_writer(const std::string& path, std::size_t bytes, Temporary how) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    cli::install_interrupt_cleanup();
    const std::string content(bytes, 'x');
    try {
      cli::write_file_atomic(path, content, how);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  return pid;
}

int wait_status(pid_t pid) {
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
  return st;
}

TEST_F(OutputFiles, AnInterruptRemovesTheNamedTemporary) {
  // Deterministic: the signal is sent once the temporary is seen, so it lands mid-write.
  for (const int sig : {SIGINT, SIGTERM}) {
    bool seen = false;
    for (std::size_t bytes = std::size_t{64} << 20; !seen && bytes <= (std::size_t{512} << 20); bytes *= 2) {
      const pid_t pid = spawn_writer(at("out.bin"), bytes, Temporary::Named);
      ASSERT_GT(pid, 0);
      for (int i = 0; i < 20000 && !seen; ++i) {
        for (const auto& name : entries()) seen = seen || name.find(".tmp.") != std::string::npos;
        if (!seen) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (seen) ::kill(pid, sig);
      const int st = wait_status(pid);
      if (seen) {
        // The write may just have finished; otherwise the process ended by the signal.
        if (WIFSIGNALED(st)) {
          EXPECT_EQ(WTERMSIG(st), sig);
          EXPECT_TRUE(entries().empty()) << "left: " << entries().front();
        } else {
          EXPECT_EQ(entries(), std::vector<std::string>{"out.bin"});
        }
      }
      fs::remove(at("out.bin"));
    }
    if (!seen) GTEST_SKIP() << "the writes finished before their temporaries could be seen";
  }
}

TEST_F(OutputFiles, EvenSigkillLeavesNoTemporary) {
  if (!has_unnamed_files()) GTEST_SKIP() << "the file system of " << dir_ << " has no unnamed files (O_TMPFILE)";
  constexpr std::size_t kBytes = std::size_t{128} << 20;
  for (const bool replace : {false, true})
    for (const int delay_ms : {0, 5, 20, 50, 100}) {
      if (replace) cli::write_file_atomic(at("out.bin"), "old");
      const pid_t pid = spawn_writer(at("out.bin"), kBytes, Temporary::Auto);
      ASSERT_GT(pid, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      ::kill(pid, SIGKILL);
      (void)wait_status(pid);
      // The old file or the whole new one, and nothing else.
      const auto left = entries();
      if (replace || !left.empty()) {
        ASSERT_EQ(left, std::vector<std::string>{"out.bin"}) << delay_ms;
        const auto size = fs::file_size(at("out.bin"));
        EXPECT_TRUE(size == 3 || size == kBytes) << size;
      }
      fs::remove(at("out.bin"));
    }
}

TEST_F(OutputFiles, AnInterruptRemovesRegisteredFilesAndFolders) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    cli::install_interrupt_cleanup();
    fs::create_directory(at("dump"));
    cli::RemoveOnInterrupt folder(at("dump"), /*folder=*/true);
    cli::write_file_atomic(at("dump/q.npy"), "q");
    cli::RemoveOnInterrupt file(at("dump/q.npy"));
    cli::RemoveOnInterrupt kept(at("kept"));
    kept.release();
    std::ofstream(at("kept")) << "k";
    ::raise(SIGTERM);
    ::_exit(0);
  }
  const int st = wait_status(pid);
  ASSERT_TRUE(WIFSIGNALED(st));
  EXPECT_EQ(WTERMSIG(st), SIGTERM);
  EXPECT_EQ(entries(), std::vector<std::string>{"kept"});
}

TEST_F(OutputFiles, AFolderOfOutputsIsCheckedWithoutBeingMade) {
  cli::check_output_dir(at("a/b/c"), "--dump");
  EXPECT_TRUE(entries().empty());
  cli::write_file_atomic(at("file"), "x");
  EXPECT_NE(usage_error([&] { cli::check_output_dir(at("file"), "--dump"); }).find("Not a directory"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { cli::check_output_dir(at("file/sub"), "--dump"); }).find("is not a folder"),
            std::string::npos);
  EXPECT_NE(usage_error([&] { cli::check_output_dir("/proc/charm-dump", "--dump"); }).find("is not writable"),
            std::string::npos);
}

}  // namespace
}  // namespace charm::test
