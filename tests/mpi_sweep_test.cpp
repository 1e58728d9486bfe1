// `mpirun -np N charm sweep`: the configurations spread over the processes, the rows on rank 0
// byte-identical to one process's; a process killed mid-sweep ends the job at once with one line
// and no output; a stopped one is a stall (exit 3) after --timeout-s; processes given different
// lists are refused once (exit 2).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "mpi_util.hpp"
#include "test_util.hpp"

namespace {

using namespace charm_test_mpi;

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string temp(const std::string& name) { return charm::test::temp_path("mpi_sweep_" + name); }

const std::string kTopo = std::string(CHARM_SOURCE_DIR) + "/topologies/h100-2x8.json";
// 4 x 3 x 2 x 2 x 2 layouts = 96 configurations, both passes, causal: tasks of unequal cost.
const std::string kGrid = "sweep -t " + kTopo +
                          " --batch 1,2,4,8 --seq 8k..32k*2 --heads 8,16 --head-dim 64,128 --layout contiguous,zigzag "
                          "--causal --pass both --algos ring,charm,rm+,ulysses";
// About 22,000 configurations: long enough to be killed in the middle.
const std::string kLong = "sweep -t " + kTopo +
                          " --batch 1..16 --seq 1k..1M*2 --heads 4..64+4 --head-dim 64,128,192,256 --layout "
                          "contiguous,zigzag --algos ring,charm";

int lines_with(const std::string& out, const std::string& what) {
  int n = 0;
  for (std::size_t at = out.find(what); at != std::string::npos; at = out.find(what, at + 1)) ++n;
  return n;
}

TEST(MpiSweep, RowsAreTheSingleProcessRowsByteForByte) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string one = temp("one.csv"), four = temp("four.csv"), json = temp("four.json");
  const auto a = shell(std::string(CHARM_BIN) + " " + kGrid + " --jobs 2 --out " + one);
  ASSERT_EQ(a.code, 0) << a.out;
  const auto b = mpirun(4, kGrid + " --jobs 2 --out " + four + " --json-out " + json);
  ASSERT_EQ(b.code, 0) << b.out;
  EXPECT_NE(b.out.find("4 processes x 2 jobs"), std::string::npos) << b.out;
  EXPECT_EQ(lines_with(b.out, "charm sweep: 96 configurations"), 1) << "rank 0 alone speaks: " << b.out;
  const std::string csv = read(one);
  ASSERT_GT(csv.size(), 1000u);
  EXPECT_EQ(read(four), csv);
  EXPECT_NE(read(json).find("\"rows\""), std::string::npos);
  for (const auto& f : {one, four, json}) std::filesystem::remove(f);
}

/// Starts the long sweep on 4 processes, sends `sig` to rank `victim` once the sweep runs, and
/// returns the job's output, exit code and the seconds from the signal to the job's end.
struct Ended {
  Result r;
  double seconds = -1;
};
Ended signal_one_rank(const std::string& sig, int victim, const std::string& csv) {
  const std::string log = temp("log_" + sig);
  const std::string cmd = std::string(CHARM_MPIRUN) + " -q --oversubscribe -np 4 " + CHARM_BIN + " " + kLong +
                          " --jobs 1 --timeout-s 3 --out " + csv + " > " + log + " 2>&1";
  // Waits for the sweep's first line (every process is past MPI_Init and the agreements), lets
  // it run a second, then signals the process whose launcher environment names it rank `victim`.
  const std::string script =
      "{ " + cmd + "; echo \"rc=$?\" >> " + log + "; } &\nm=$!\n" + "for i in $(seq 600); do grep -q 'processes x' " +
      log + " 2>/dev/null && break; sleep 0.05; done\nsleep 1\nfor p in $(pgrep -f '" + CHARM_BIN +
      " sweep'); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx OMPI_COMM_WORLD_RANK=" + std::to_string(victim) +
      " && v=$p; done\nt0=$(date +%s%N)\nkill -" + sig + " $v\nwait $m\nt1=$(date +%s%N)\nkill -KILL $v 2>/dev/null\n" +
      "echo \"ms=$(( (t1 - t0) / 1000000 ))\" >> " + log + "\n";
  const std::string file = temp("script_" + sig + ".sh");
  std::ofstream(file) << script;
  Ended e;
  e.r = shell("timeout 200 bash " + file);
  if (std::getenv("CHARM_KEEP_SCRIPT") == nullptr) std::filesystem::remove(file);
  e.r.out = read(log);
  std::filesystem::remove(log);
  const auto rc = e.r.out.rfind("rc="), ms = e.r.out.rfind("ms=");
  if (rc != std::string::npos) e.r.code = std::stoi(e.r.out.substr(rc + 3));
  if (ms != std::string::npos) e.seconds = std::stod(e.r.out.substr(ms + 3)) / 1000;
  return e;
}

TEST(MpiSweep, AKilledProcessEndsTheJobWithOneLineAndNoOutput) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string csv = temp("killed.csv");
  const auto e = signal_one_rank("KILL", 3, csv);
  EXPECT_NE(e.r.code, 0) << e.r.out;
  EXPECT_GE(e.seconds, 0) << e.r.out;
  EXPECT_LT(e.seconds, 15) << e.r.out;
  EXPECT_EQ(lines_with(e.r.out, "charm sweep: interrupted") + lines_with(e.r.out, "charm: error"), 1) << e.r.out;
  EXPECT_NE(e.r.out.find("no output written"), std::string::npos) << e.r.out;
  EXPECT_FALSE(std::filesystem::exists(csv)) << e.r.out;
}

class MpiSweepStop : public ::testing::TestWithParam<int> {};

TEST_P(MpiSweepStop, AStoppedProcessIsAStallWithinTheTimeout) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string csv = temp("stopped.csv");
  // Rank 3 stopped: rank 0 misses its heartbeat. Rank 0 stopped: the others miss its answers, and
  // the lowest of them speaks first (their deadlines are staggered by rank). A process stopped in
  // the middle of a send over shared memory can also hold up its receiver (Open MPI's vader FIFO
  // waits for the writer to link its entry), so with rank 3 stopped it may be rank 0 that stops
  // answering: then rank 1 names rank 0. Either way one stall line, exit 3, no output.
  const auto e = signal_one_rank("STOP", GetParam(), csv);
  EXPECT_EQ(e.r.code, 3) << e.r.out;
  EXPECT_EQ(lines_with(e.r.out, "charm: error: stall: rank "), 1) << e.r.out;
  EXPECT_EQ(lines_with(e.r.out, "charm sweep: interrupted"), 0) << "the stall is the one line: " << e.r.out;
  EXPECT_LT(e.seconds, 3 + 12) << e.r.out;  // the timeout, and the abort under load
  const bool named = e.r.out.find("rank 3 has not been heard from") != std::string::npos ||
                     e.r.out.find("for rank 0 to hand out") != std::string::npos;
  EXPECT_TRUE(named) << e.r.out;
  EXPECT_FALSE(std::filesystem::exists(csv)) << e.r.out;
}

INSTANTIATE_TEST_SUITE_P(Victims, MpiSweepStop, ::testing::Values(3, 0),
                         [](const auto& p) { return "rank" + std::to_string(p.param); });

TEST(MpiSweep, ProcessesGivenDifferentListsAreRefusedOnce) {
  if (!have_mpirun()) GTEST_SKIP() << "mpirun not found";
  const std::string base = std::string(CHARM_BIN) + " sweep -t " + kTopo + " --heads 8 --head-dim 64 --batch 1 --out " +
                           temp("mpmd.csv") + " --seq ";
  const auto r = shell(std::string("timeout 120 ") + CHARM_MPIRUN + " -q --oversubscribe -np 1 " + base +
                       "8k : -np 1 " + base + "16k");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines_with(r.out, "charm: error: mpirun: the ranks were started with different work: rank 1 has --seq "
                              "16k, rank 0 has --seq 8k"),
            1)
      << r.out;
}

}  // namespace
