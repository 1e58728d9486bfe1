// Reliability of the command line beyond one bad flag: inputs that outputs must not
// destroy, a stdout that fails, names with spaces, ranges and JSON that would run away,
// work that would not fit. Each case runs the `charm` binary (docs/errors.md has the
// one-line cases; these need a fixture, a clock or more than one line of output).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "tools/cli_common.hpp"

namespace charm::test {
namespace {

namespace fs = std::filesystem;

class Reliability : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path(std::string("rel_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  [[nodiscard]] std::string at(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static std::string repo(const std::string& rel) { return std::string(CHARM_SOURCE_DIR) + "/" + rel; }
  /// The output's last line (a sweep says what it does on stderr first).
  static std::string last_line(const std::string& out) {
    const auto end = out.find_last_not_of('\n');
    if (end == std::string::npos) return {};
    const auto start = out.rfind('\n', end);
    return out.substr(start == std::string::npos ? 0 : start + 1,
                      end - (start == std::string::npos ? 0 : start + 1) + 1);
  }
  fs::path dir_;
};

TEST_F(Reliability, ADumpNeverReplacesThePlanItRuns) {
  fs::create_directory(at("D"));
  fs::copy_file(repo("tests/data/bad/plan-ok.json"), at("D/meta.json"));
  const auto r = run_charm("run --backend threads --plan " + at("D/meta.json") + " --dump " + at("D"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "charm: error: --dump: " + at("D/meta.json") + ": is also the --plan input (" + at("D/meta.json") +
                       "); an output may not replace what the command reads\n");
  EXPECT_EQ(read(at("D/meta.json")), read(repo("tests/data/bad/plan-ok.json")));
  EXPECT_EQ(std::distance(fs::directory_iterator(at("D")), fs::directory_iterator{}), 1);
  // Beside the plan, in the same folder, the dump is fine.
  fs::rename(at("D/meta.json"), at("D/plan.json"));
  const auto ok = run_charm("run --backend threads --plan " + at("D/plan.json") + " --dump " + at("D"));
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_EQ(read(at("D/plan.json")), read(repo("tests/data/bad/plan-ok.json")));
  EXPECT_TRUE(fs::exists(at("D/meta.json")));
}

TEST_F(Reliability, AHardLinkToTheTopologyIsTheTopology) {
  fs::copy_file(repo("topologies/l20-4.json"), at("t.json"));
  fs::create_hard_link(at("t.json"), at("out.csv"));
  const auto r =
      run_charm("sweep -t " + at("t.json") + " --batch 1 --seq 4k --heads 8 --head-dim 128 --out " + at("out.csv"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--out: " + at("out.csv") + ": is also the --topology input (" + at("t.json") + ")"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(read(at("t.json")), read(repo("topologies/l20-4.json")));
}

TEST_F(Reliability, AFullStdoutFailsTheSweep) {
  // The sweep says what it does on stderr; its JSON on stdout could not be written.
  const auto r = run_cmd("{ " + std::string(CHARM_BIN) + " sweep -t " + repo("topologies/l20-4.json") +
                         " --batch 1,2 --seq 4k --heads 8 --head-dim 128 --json > /dev/full; }");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(last_line(r.out), "charm: error: stdout: No space left on device") << r.out;
  // Large answers too: many blocks, the first failure's reason.
  const auto big = run_cmd("{ " + std::string(CHARM_BIN) + " commlist --ranks 1024 > /dev/full; }");
  EXPECT_EQ(big.code, 2) << big.out;
  EXPECT_EQ(big.out, "charm: error: stdout: No space left on device\n");
}

// A library may keep the FILE* it found in `stdout` and flush it at exit (on an H100 machine,
// cuBLASLt's exit handler did, and 3 GPU runs in 30 aborted after their answer, "glibc detected an
// invalid stdio handle", while charm closed its checked stream with fclose): the stream stays alive.
TEST_F(Reliability, StdoutIsALiveStreamWhileTheProcessExits) {
  const auto r =
      run_cmd("LD_PRELOAD=" + std::string(CHARM_STDOUT_PROBE) + " " + std::string(CHARM_BIN) + " commlist --ranks 2");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("L1 kv=0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("stdout_probe"), std::string::npos) << r.out;
}

TEST(SplitList, SpacesInsideANameSurvive) {
  using V = std::vector<std::string>;
  EXPECT_EQ(charm::split_list("topo/my topo.json"), V{"topo/my topo.json"});
  EXPECT_EQ(charm::split_list(" a , b c ,,\td\t, "), (V{"a", "b c", "d"}));
  EXPECT_EQ(charm::split_list(""), V{});
  EXPECT_EQ(charm::split_list(" , ,"), V{});
}

TEST(Counted, OneIsSingularInEveryReportHead) {
  EXPECT_EQ(charm::counted(1, "rank"), "1 rank");
  EXPECT_EQ(charm::counted(16, "domain"), "16 domains");
  EXPECT_EQ(charm::counted(0, "rank"), "0 ranks");
  const auto sim = run_charm("simulate --uniform --ranks 1 --bw-gbps 50 --tflops 300 --seq 4k");
  ASSERT_EQ(sim.code, 0) << sim.out;
  EXPECT_NE(sim.out.find("on uniform-1x50GBps (1 rank, 1 domain)"), std::string::npos) << sim.out;
  const auto cmp = run_charm("compare --uniform --ranks 16 --bw-gbps 50 --tflops 300 --seq 4k --algos ring");
  ASSERT_EQ(cmp.code, 0) << cmp.out;
  EXPECT_NE(cmp.out.find("on uniform-16x50GBps (16 ranks, 1 domain)"), std::string::npos) << cmp.out;
}

TEST_F(Reliability, ATopologyWithASpaceInItsNameIsThatFile) {
  fs::create_directory(at("topo"));
  fs::copy_file(repo("topologies/l20-4.json"), at("topo/my topo.json"));
  fs::copy_file(repo("topologies/h100-2x8.json"), at("topo/mytopo.json"));  // what the old splitter read
  const auto r = run_charm("sweep -t '" + at("topo/my topo.json") +
                           "' --batch 1 --seq 4k --heads 8 --head-dim 128 --algos ring --out " + at("s.csv"));
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string csv = read(at("s.csv"));
  EXPECT_NE(csv.find("\nl20-4,4,"), std::string::npos) << csv;
  EXPECT_EQ(csv.find("h100"), std::string::npos) << csv;
}

/// `charm ARGS` under an address-space cap of `kib` KiB (ulimit -v); nullopt where charm cannot even
/// start under it (a sanitizer's shadow memory, say).
std::optional<CmdResult> under_memory_cap(long kib, const std::string& args) {
  const std::string cap = "ulimit -v " + std::to_string(kib) + "; ";
  if (run_cmd(cap + std::string(CHARM_BIN) + " --version").code != 0) return std::nullopt;
  return run_cmd(cap + std::string(CHARM_BIN) + " " + args);
}

// Memory that runs out in a worker thread (advise simulates on a pool) was std::terminate's
// "terminate called after throwing an instance of 'std::bad_alloc'", SIGABRT.
TEST_F(Reliability, AnAllocationThatFailsInAWorkerThreadIsOneLine) {
  const auto r = under_memory_cap(1200000, "advise --uniform --ranks 4096 --bw-gbps 10 --tflops 100 --seq 64M "
                                           "--heads 8 --head-dim 64 --algos usp --jobs 2");
  if (!r) GTEST_SKIP() << "charm does not start under a 1.2 GB cap here";
  EXPECT_EQ(r->code, 3) << r->out;
  EXPECT_EQ(r->out, "charm: error: out of memory\n");
}

// A sweep's task that cannot allocate is no "simulation failed (a simulator bug)": the sweep ends
// with the one line, and writes nothing.
TEST_F(Reliability, AnAllocationThatFailsInASweepEndsIt) {
  const auto r = under_memory_cap(1000000, "sweep -t " + repo("topologies/h100-2x8.json") +
                                               " --set nodes=1024 -b 1 -s 64M --heads 8 --head-dim 64 --algos usp "
                                               "--max-memory 100G --jobs 2 --out " +
                                               at("s.csv"));
  if (!r) GTEST_SKIP() << "charm does not start under a 1 GB cap here";
  EXPECT_EQ(r->code, 3) << r->out;
  EXPECT_EQ(last_line(r->out), "charm: error: out of memory") << r->out;
  EXPECT_EQ(r->out.find("simulation failed"), std::string::npos) << r->out;
  EXPECT_FALSE(fs::exists(at("s.csv")));
}

// A large plan read under a cap: the parsed document's destructor allocates (nlohmann flattens it
// into a vector first), so memory that ran out while reading aborted in that destructor.
TEST_F(Reliability, AnAllocationThatFailsWhileReadingABigPlanIsOneLine) {
  ASSERT_EQ(run_charm("plan --algo ring --ranks 256 --seq 256k --heads 8 --head-dim 64 -o " + at("p.json")).code, 0);
  for (const long kib : {300000L, 400000L, 500000L}) {
    const auto r = under_memory_cap(kib, "validate " + at("p.json"));
    if (!r) GTEST_SKIP() << "charm does not start under a " << kib << " KiB cap here";
    EXPECT_EQ(r->code, 3) << kib << " KiB: " << r->out;
    EXPECT_EQ(r->out, "charm: error: out of memory\n") << kib << " KiB";
  }
}

}  // namespace
}  // namespace charm::test
