// `charm calibrate` end to end: the report (text and JSON), the calibrated topology that every
// command then accepts, --nccl-tests, and bad input as one line with exit code 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>
#include <vector>

#include "test_util.hpp"

namespace charm::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string src(const std::string& rel) { return std::string(CHARM_SOURCE_DIR) + "/" + rel; }

/// Runs charm with stderr (progress) dropped, for output that must parse.
CmdResult run_quiet(const std::string& args) {
  return run_cmd("(" + std::string(CHARM_BIN) + " " + args + " 2>/dev/null)");
}

class CalibrateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path("calibrate_cli");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    csv_ = dir_ + "/runs.csv";
    std::ofstream(csv_) << "# made up for the test\n"
                           "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms\n"
                           "ring,fwd,1,8192,8,8,128,bf16,0,contiguous,2.0\n"
                           "rm+,fwd,1,8192,8,8,128,bf16,0,contiguous,2.4\n"
                           "ring,fwd,1,32768,8,8,128,bf16,0,contiguous,20\n"
                           "rm+,fwd,1,32768,8,8,128,bf16,0,contiguous,21\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_, csv_;
};

TEST_F(CalibrateCli, JsonReportAndALoadableTopology) {
  const std::string out = dir_ + "/fitted.json";
  auto r = run_quiet("calibrate -t " + src("topologies/l20-4.json") + " -m " + csv_ + " -o " + out +
                     " --json --restarts 0 --jobs 2");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["schema"], 1);
  ASSERT_EQ(j["rows"].size(), 4u);
  EXPECT_EQ(j["rows"][0]["line"], 3);
  EXPECT_EQ(j["rows"][0]["ranks"], 4);
  EXPECT_EQ(j["rows"][0]["domains"], 1);
  for (const auto& row : j["rows"]) {
    EXPECT_GT(row["predicted_ms"].get<double>(), 0);
    EXPECT_TRUE(row["loo_predicted_ms"].is_number());
    EXPECT_NEAR(row["error"].get<double>(), row["predicted_ms"].get<double>() / row["measured_ms"].get<double>() - 1,
                1e-12);
  }
  ASSERT_EQ(j["speedups"].size(), 2u);
  EXPECT_EQ(j["speedups"][0]["ring_line"], 3);
  EXPECT_EQ(j["speedups"][0]["line"], 4);
  EXPECT_TRUE(j["mape_percent"]["time"]["in_sample"].is_number());
  EXPECT_TRUE(j["mape_percent"]["time"]["leave_one_out"].is_number());
  EXPECT_TRUE(j["mape_percent"]["speedup"]["in_sample"].is_number());
  ASSERT_GE(j["parameters"].size(), 1u);
  for (const auto& p : j["parameters"]) {
    EXPECT_GE(p["value"].get<double>(), p["bounds"][0].get<double>());
    EXPECT_LE(p["value"].get<double>(), p["bounds"][1].get<double>());
  }
  // The calibrated file keeps the base's form, with a calibration block every command accepts.
  std::ifstream in(out);
  const auto doc = json::parse(in);
  EXPECT_EQ(doc["name"], "l20-4-calibrated");
  EXPECT_EQ(doc["calibration"]["measurements"]["rows"], 4);
  EXPECT_EQ(run_charm("topo " + out).code, 0);
  auto sim = run_charm("simulate -t " + out + " --algo ring --seq 8192 --heads 8 --head-dim 128 --json");
  ASSERT_EQ(sim.code, 0) << sim.out;
  // The calibrated file predicts what the report says for that row.
  EXPECT_NEAR(json::parse(sim.out)["time_ms"].get<double>(), j["rows"][0]["predicted_ms"].get<double>(), 1e-9);
}

TEST_F(CalibrateCli, TextReport) {
  const std::string out = dir_ + "/fitted.json";
  auto r = run_quiet("calibrate -t " + src("topologies/l20-4.json") + " -m " + csv_ + " -o " + out +
                     " --restarts 0 --no-loo --fit gpu.efficiency.fwd,intra.bandwidth_gbps");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("# charm calibrate: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("  gpu.efficiency.fwd "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  intra.bandwidth_gbps "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# time MAPE "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + out), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out));
}

TEST_F(CalibrateCli, LeaveOneOutMethodsAndTheProgressLine) {
  const std::string out = dir_ + "/fitted.json";
  const std::string base = "calibrate -t " + src("topologies/l20-4.json") + " -m " + csv_ + " -o " + out +
                           " --restarts 0 --fit gpu.efficiency.fwd,intra.bandwidth_gbps ";
  // Not a terminal: no progress line, stdout and stderr together hold the report alone.
  auto one = run_charm(base);
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(one.out.find("objective "), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("# leave-one-out: one Gauss-Newton step from the full fit"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("# checked by exact refits of the 3 rows it moves most: line "), std::string::npos) << one.out;
  auto exact = run_charm(base + "--loo exact");
  ASSERT_EQ(exact.code, 0) << exact.out;
  EXPECT_NE(exact.out.find("# leave-one-out: exact, a least-squares refit without each row"), std::string::npos)
      << exact.out;
  // Asked for, the line is drawn beside the JSON (on stderr; stdout still parses).
  auto progress = run_cmd("(" + std::string(CHARM_BIN) + " " + base + "--json --progress 2>" + dir_ + "/err.txt)");
  ASSERT_EQ(progress.code, 0) << progress.out;
  const auto j = json::parse(progress.out);
  EXPECT_EQ(j["leave_one_out"]["method"], "one-step");
  EXPECT_EQ(j["leave_one_out"]["checks"].size(), 3u);
  EXPECT_GT(j["simulations"].get<int>(), j["evaluations"].get<int>());
}

TEST_F(CalibrateCli, NcclTestsFixALinkClass) {
  const std::string out = dir_ + "/fitted.json";
  auto r = run_quiet("calibrate -t " + src("topologies/l20-4.json") + " -m " + csv_ + " -o " + out +
                     " --json --restarts 0 --no-loo --fit gpu.efficiency.fwd --nccl-tests intra=" +
                     src("tests/data/nccl-tests-sendrecv-sample.txt"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json::parse(r.out);
  ASSERT_EQ(j["fixed"].size(), 2u);
  EXPECT_EQ(j["fixed"][0]["path"], "intra.bandwidth_gbps");
  EXPECT_NEAR(j["fixed"][0]["value"].get<double>(), 20, 0.05);
  EXPECT_EQ(j["fixed"][1]["path"], "intra.latency_us");
  EXPECT_NEAR(j["fixed"][1]["value"].get<double>(), 5, 0.05);
  std::ifstream in(out);
  const auto doc = json::parse(in);
  EXPECT_NEAR(doc["intra"]["bandwidth_gbps"].get<double>(), 20, 0.05);
}

TEST_F(CalibrateCli, BadInputIsOneLineAndNoFile) {
  const std::string out = dir_ + "/fitted.json";
  std::ofstream(dir_ + "/bad.csv") << "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms\n"
                                      "ring,fwd,1,8192,8,8,128,bf16,0,contiguous,abc\n";
  const std::string base = "calibrate -t " + src("topologies/l20-4.json") + " -o " + out + " ";
  struct Case {
    std::string args, message;
  };
  for (const auto& c : std::vector<Case>{
           {"-m " + dir_ + "/bad.csv", dir_ + "/bad.csv:2:11: time_ms: must be a number of milliseconds, got 'abc'"},
           {"-m " + dir_ + "/none.csv", dir_ + "/none.csv: cannot open a measurements file: No such file or directory"},
           {"-m " + csv_ + " --fit gpu.bogus", "--fit: gpu.bogus: no such field in " + src("topologies/l20-4.json")},
           {"-m " + csv_ + " --jobs 0", "--jobs: must be in [1, 1024], got 0"},
           {"-m " + csv_ + " --speedup-weight -1", "--speedup-weight: must be in [0, 100], got -1"},
           {"-m " + csv_ + " --loo fast", "--loo: expected one-step, exact or off, got 'fast'"},
           {"-m " + csv_ + " --nccl-tests intra",
            "--nccl-tests: expected CLASS=LOG (CLASS intra, numa or inter), got 'intra'"},
           {"-m " + csv_ + " --nccl-tests inter=" + src("tests/data/nccl-tests-sendrecv-sample.txt"),
            "--nccl-tests: " + src("topologies/l20-4.json") + " has no 'inter' block"},
       }) {
    auto r = run_charm(base + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out, "charm: error: " + c.message + "\n");
    EXPECT_FALSE(fs::exists(out));
  }
}

}  // namespace
}  // namespace charm::test
