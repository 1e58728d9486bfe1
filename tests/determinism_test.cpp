// Determinism and atomic outputs: the same inputs give byte-identical
// plan JSON, simulation JSON and Chrome trace on every run, the sweep's CSV and
// JSON are the same with any --jobs, and a sweep killed mid-way (SIGKILL: no
// handler runs) leaves the old output file untouched.
#include <gtest/gtest.h>

#include <csignal>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "test_util.hpp"

extern char** environ;

namespace charm::test {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path fresh_dir(const std::string& name) {
  const fs::path d = temp_path("det_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const std::string kSrc = CHARM_SOURCE_DIR;

TEST(Determinism, PlanJsonIsByteIdentical) {
  const auto dir = fresh_dir("plan");
  for (const std::string algo : {"ring", "ring-zigzag", "merge", "rm+", "charm"}) {
    const std::string flags =
        " --algo " + algo + " --ranks 8 --domains 2 --seq 16k --heads 4 --kv-heads 2 --causal --pass both";
    ASSERT_EQ(run_charm("plan" + flags + " -o " + (dir / "a.json").string()).code, 0) << algo;
    ASSERT_EQ(run_charm("plan" + flags + " -o " + (dir / "b.json").string()).code, 0) << algo;
    const auto a = slurp(dir / "a.json");
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, slurp(dir / "b.json")) << algo;
  }
  fs::remove_all(dir);
}

TEST(Determinism, SimulationJsonAndTraceAreByteIdentical) {
  const auto dir = fresh_dir("sim");
  for (const std::string algo : {"ring", "charm"}) {
    std::string out[2], trace[2];
    for (int i = 0; i < 2; ++i) {
      const auto t = (dir / ("t" + std::to_string(i) + ".json")).string();
      const auto r = run_charm("simulate -t " + kSrc + "/topologies/h100-2x8.json --algo " + algo +
                               " --seq 64k --heads 8 --causal --pass both --json --trace " + t);
      ASSERT_EQ(r.code, 0) << r.out;
      out[i] = r.out;
      trace[i] = slurp(t);
    }
    EXPECT_EQ(out[0], out[1]) << algo;
    EXPECT_FALSE(trace[0].empty());
    EXPECT_EQ(trace[0], trace[1]) << algo;
  }
  fs::remove_all(dir);
}

TEST(Determinism, SweepOutputsAreTheSameWithAnyJobs) {
  const auto dir = fresh_dir("sweep");
  const std::string args =
      "sweep -t " + kSrc + "/topologies/l20-8-2numa.json," + kSrc +
      "/topologies/h20-8.json --batch 1,2 --seq 4k..64k*4 --heads 8,16 --kv-heads 4,8 --head-dim 64,128 "
      "--causal --pass both";
  std::string csv0, json0;
  for (int jobs : {1, 2, 5}) {
    const auto csv = dir / ("s" + std::to_string(jobs) + ".csv");
    const auto js = dir / ("s" + std::to_string(jobs) + ".json");
    const auto r =
        run_charm(args + " --jobs " + std::to_string(jobs) + " --out " + csv.string() + " --json-out " + js.string());
    ASSERT_EQ(r.code, 0) << r.out;
    if (jobs == 1) {
      csv0 = slurp(csv);
      json0 = slurp(js);
      EXPECT_FALSE(csv0.empty());
    } else {
      EXPECT_EQ(slurp(csv), csv0) << "--jobs " << jobs;
      EXPECT_EQ(slurp(js), json0) << "--jobs " << jobs;
    }
  }
  fs::remove_all(dir);
}

TEST(AtomicOutput, SweepKilledMidwayLeavesTheOldFile) {
  const auto dir = fresh_dir("kill");
  const auto csv = dir / "s.csv";
  { std::ofstream(csv) << "old\n"; }
  // Minutes of work, so SIGKILL lands while the workers run; no handler can clean up.
  std::vector<std::string> args{
      CHARM_BIN, "sweep",     "--topology", kSrc + "/topologies/l20-8-2numa.json," + kSrc + "/topologies/h20-8.json",
      "--batch", "1..64",     "--seq",      "1k..1M*2",
      "--heads", "8..64*2",   "--head-dim", "64,128",
      "--pass",  "both",      "--jobs",     "2",
      "--out",   csv.string()};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, CHARM_BIN, &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  ::usleep(700 * 1000);
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the sweep ended before the signal";
  EXPECT_EQ(slurp(csv), "old\n");
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path(), csv) << "left a partial file";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace charm::test
