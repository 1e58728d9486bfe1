// `charm run --backend cuda-local` end to end. Without a device (CI, this
// project's build machines) it must exit 2 with exactly one line saying no CUDA
// device was found; with one, --check passes at bf16 tolerance and the JSON
// carries the simulator's timing fields, and --trace writes a Chrome trace.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "runtime/cuda/cuda_executor.hpp"
#include "test_util.hpp"

namespace {

/// The charm binary: $CHARM_BIN when set (a prebuilt bundle run elsewhere), else the one built beside this test.
charm::test::CmdResult run_charm(const std::string& args) {
  const char* bin = std::getenv("CHARM_BIN");
  return charm::test::run_cmd(std::string(bin != nullptr && *bin != '\0' ? bin : CHARM_BIN) + " " + args);
}
const std::string kSmall = "run --batch 1 --seq 512 --heads 4 --head-dim 64 --dtype bf16 --causal";

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CudaCli, NoDeviceIsOneLineAndExit2) {
  if (charm::rt::cuda::device_count()) GTEST_SKIP() << "a CUDA device is present";
  for (const std::string backend : {"cuda-local", "cuda"}) {
    const auto r = run_charm(kSmall + " --algo ring --ranks 4 --check --backend " + backend);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("no CUDA device was found"), std::string::npos) << r.out;
  }
}

TEST(CudaCli, CheckPassesWithTimingFieldsAndTrace) {
  if (!charm::rt::cuda::device_count()) GTEST_SKIP() << "no CUDA device";
  const std::string trace = charm::test::temp_path("cuda_trace.json");
  const auto r = run_charm(kSmall +
                           " --backend cuda-local --algo charm --ranks 4 --layout zigzag --pass both --check "
                           "--json --trace " +
                           trace);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_TRUE(j["ok"].get<bool>());
  EXPECT_LE(j["max_rel_err"]["out"].get<double>(), 1e-2);
  for (const char* k : {"time_ms", "exposed_comm_ms", "compute_busy_ms", "stream_busy_ms", "idle_ms", "device"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_GT(j["time_ms"].get<double>(), 0.0);
  std::ifstream in(trace);
  ASSERT_TRUE(in.good());
  const auto t = nlohmann::json::parse(in);
  EXPECT_GT(t["traceEvents"].size(), 10u);
  std::filesystem::remove(trace);
}

// --append-measurements without a device: the same one line, and no file is made.
TEST(CudaCli, AppendMeasurementsWithoutDeviceWritesNothing) {
  if (charm::rt::cuda::device_count()) GTEST_SKIP() << "a CUDA device is present";
  const std::string csv = charm::test::temp_path("cuda_runs_nodev.csv");
  std::filesystem::remove(csv);
  const auto r = run_charm(kSmall + " --algo ulysses --ranks 4 --backend cuda-local --append-measurements " + csv);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_FALSE(std::filesystem::exists(csv));
}

// Two runs of a region plan append two rows under one header, which charm calibrate's
// reader takes (the header is the writer's; calibrate/measurements.hpp).
TEST(CudaCli, AppendMeasurementsAddsRowsCalibrateReads) {
  if (!charm::rt::cuda::device_count()) GTEST_SKIP() << "no CUDA device";
  const std::string csv = charm::test::temp_path("cuda_runs.csv");
  std::filesystem::remove(csv);
  for (int i = 0; i < 2; ++i) {
    const auto r = run_charm(kSmall +
                             " --backend cuda-local --algo usp --ranks 4 --domains 2 --pass both --check "
                             "--append-measurements " +
                             csv);
    ASSERT_EQ(r.code, 0) << r.out;
  }
  std::ifstream in(csv);
  std::string header, row;
  std::getline(in, header);
  EXPECT_EQ(header, "algo,pass,batch,seq,heads,kv_heads,head_dim,dtype,causal,layout,time_ms,ranks,domains");
  int rows = 0;
  while (std::getline(in, row)) {
    ++rows;
    EXPECT_EQ(row.rfind("usp,both,1,512,4,4,64,bf16,1,contiguous,", 0), 0u) << row;
    EXPECT_EQ(row.substr(row.size() - 4), ",4,2") << row;
  }
  EXPECT_EQ(rows, 2);
  std::filesystem::remove(csv);
}

TEST(CudaCli, StallIsExit3) {
  if (!charm::rt::cuda::device_count()) GTEST_SKIP() << "no CUDA device";
  const auto r = run_charm(kSmall + " --backend cuda-local --algo ring --ranks 4 --inject-stall --timeout-s 5");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("stall"), std::string::npos) << r.out;
}

}  // namespace
