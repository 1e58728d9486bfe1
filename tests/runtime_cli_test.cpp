// `charm run` end to end: --check and its JSON, every pass, dtype rounding,
// --dump (natural order whatever the layout), the watchdog's exit code 3 and
// bad flags (exit 2).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "test_util.hpp"

namespace {

using Result = charm::test::CmdResult;

Result run(const std::string& args) { return charm::test::run_charm(args); }

const std::string kSmall = "run --backend threads --batch 2 --seq 256 --heads 4 --head-dim 32 --dtype fp32";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CliRun, CheckJsonHasTheDocumentedShape) {
  const auto r =
      run(kSmall + " --algo charm --ranks 4 --domains 2 --causal --layout zigzag --pass both --check --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.at("ok").get<bool>());
  for (const char* t : {"out", "lse", "dq", "dk", "dv"}) {
    EXPECT_LE(j.at("max_rel_err").at(t).get<double>(), 1e-5) << t;
    EXPECT_GE(j.at("max_abs_err").at(t).get<double>(), 0.0) << t;
  }
  EXPECT_GT(j.at("time_ms").get<double>(), 0.0);
  // The simulator's figures, from the measured op times, under simulate --json's names.
  const double busy = j.at("compute_busy_ms").at("mean").get<double>();
  EXPECT_GT(busy, 0.0);
  EXPECT_LE(busy, j.at("time_ms").get<double>() * 1.0001);
  EXPECT_GE(j.at("exposed_comm_ms").get<double>(), 0.0);
  EXPECT_GE(j.at("comm_busy_ms").at("mean").get<double>(), j.at("exposed_comm_per_rank_ms").at("mean").get<double>());
  // Idle + busy is the last op's end, within the plan's wall time.
  EXPECT_LE(j.at("idle_ms").at("mean").get<double>() + busy, j.at("time_ms").get<double>() * 1.0001);
}

TEST(CliRun, ForwardOnlyAndBackwardOnlyPassesCheck) {
  auto f = run(kSmall + " --algo rm+ --ranks 4 --causal --pass fwd --check --json");
  ASSERT_EQ(f.code, 0) << f.out;
  auto jf = nlohmann::json::parse(f.out);
  EXPECT_TRUE(jf["max_rel_err"]["dq"].is_null());
  EXPECT_LE(jf["max_rel_err"]["out"].get<double>(), 1e-5);
  auto b = run(kSmall + " --algo merge --ranks 8 --pass bwd --check --json");
  ASSERT_EQ(b.code, 0) << b.out;
  auto jb = nlohmann::json::parse(b.out);
  EXPECT_TRUE(jb["max_rel_err"]["out"].is_null());  // O and LSE are inputs of a backward-only plan
  EXPECT_LE(jb["max_rel_err"]["dk"].get<double>(), 1e-5);
}

TEST(CliRun, HalfPrecisionInputsPassTheirTolerance) {
  for (const char* dt : {"bf16", "fp16"}) {
    const auto r = run("run --batch 1 --seq 128 --heads 2 --head-dim 32 --dtype " + std::string(dt) +
                       " --algo ring --ranks 4 --causal --pass both --check");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("check PASSED"), std::string::npos) << r.out;
  }
}

TEST(CliRun, HalfPrecisionStoresHalfPrecision) {
  // With results rounded to bf16 (8-bit mantissa) the error against the fp64 reference is
  // of the order of 2^-9 of the largest value, not the 1e-7 of fp32 arithmetic; and the
  // buffers count 2 bytes per half-precision element: bf16 peaks below fp32 on the same plan.
  auto peak_and_out = [&](const char* dt) {
    const auto r = run("run --batch 1 --seq 512 --heads 2 --head-dim 32 --dtype " + std::string(dt) +
                       " --algo charm --ranks 4 --domains 2 --pass both --check --json");
    EXPECT_EQ(r.code, 0) << r.out;
    const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
    return std::pair{j.at("peak_buffer_bytes_per_rank").get<double>(), j.at("max_rel_err").at("out").get<double>()};
  };
  const auto [bf16_peak, bf16_err] = peak_and_out("bf16");
  const auto [fp32_peak, fp32_err] = peak_and_out("fp32");
  EXPECT_GT(bf16_err, 1e-4);
  EXPECT_LT(bf16_err, 1e-2);
  EXPECT_LT(fp32_err, 1e-5);
  EXPECT_LT(bf16_peak, fp32_peak);  // Q, K, V, dO and partial O halve; fp32 gradient partials and LSE do not
}

TEST(CliRun, APlanFileRunsAndPassesItsCheck) {
  const std::string file = charm::test::temp_path("run_plan.json");
  auto r = run("plan --algo charm --ranks 4 --domains 2 --seq 512 --heads 2 --head-dim 32 --dtype fp32 --causal --pass "
               "both --out " +
               file);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("run --backend threads --plan " + file + " --check");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("check PASSED"), std::string::npos) << r.out;
  std::remove(file.c_str());
}

TEST(CliRun, TraceHasOneSlicePerOpInTheSimulatorsSchema) {
  const std::string dir = charm::test::temp_dir() + "/";
  const std::string w = " --algo charm --ranks 4 --domains 2 --seq 512 --heads 2 --head-dim 32 --pass both";
  auto r = run("run --backend threads" + w + " --trace " + dir + "charm_measured.json");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("simulate" +
          std::string(" --uniform --ranks 4 --domains 2 --bw-gbps 10 --tflops 10 --algo charm --seq 512 --heads 2 "
                      "--head-dim 32 --pass both --trace ") +
          dir + "charm_predicted.json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto slices = [](const std::string& path) {
    std::map<int, std::string> by_op;  // op id -> name
    const auto j = nlohmann::json::parse(read_file(path));
    for (const auto& e : j.at("traceEvents"))
      if (e.at("ph") == "X") by_op[e.at("args").at("op").get<int>()] = e.at("name").get<std::string>();
    return std::pair{by_op, j.at("otherData")};
  };
  const auto [measured, meta] = slices(dir + "charm_measured.json");
  const auto [predicted, pmeta] = slices(dir + "charm_predicted.json");
  ASSERT_GT(measured.size(), 50u);
  EXPECT_EQ(measured.rbegin()->first + 1, int(measured.size()));  // every op of the plan once: ids 0 .. n-1
  EXPECT_EQ(measured, predicted);                                 // the same ids and names as the prediction
  EXPECT_TRUE(meta.at("measured").get<bool>());
  EXPECT_EQ(meta.at("backend"), "threads");
  // And the two side by side.
  r = run("trace-diff " + dir + "charm_predicted.json " + dir + "charm_measured.json --top 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("# charm trace-diff: " + std::to_string(measured.size()) + " ops"), std::string::npos) << r.out;
}

TEST(CliRun, DumpIsInNaturalOrderWhateverTheLayout) {
  const auto dir = std::filesystem::temp_directory_path() / ("charm_dump_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto a = run(kSmall + " --algo ring --ranks 4 --causal --pass both --dump " + (dir / "contig").string());
  ASSERT_EQ(a.code, 0) << a.out;
  auto b = run(kSmall + " --algo ring-zigzag --layout zigzag --ranks 4 --causal --pass both --dump " +
               (dir / "zz").string());
  ASSERT_EQ(b.code, 0) << b.out;
  for (const char* f : {"q", "k", "v", "dout", "out", "lse", "dq", "dk", "dv"}) {
    const auto p = dir / "contig" / (std::string(f) + ".npy");
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    EXPECT_EQ(read_file(p).substr(0, 6), "\x93NUMPY");
  }
  EXPECT_EQ(read_file(dir / "contig" / "q.npy"), read_file(dir / "zz" / "q.npy"));
  EXPECT_NE(read_file(dir / "contig" / "q.npy").find("'shape': (2, 256, 4, 32)"), std::string::npos);
  EXPECT_NE(read_file(dir / "contig" / "lse.npy").find("'shape': (2, 4, 256)"), std::string::npos);
  const auto meta = nlohmann::json::parse(read_file(dir / "zz" / "meta.json"));
  EXPECT_NEAR(meta.at("softmax_scale").get<double>(), 1.0 / std::sqrt(32.0), 1e-12);
  EXPECT_TRUE(meta.at("causal").get<bool>());
  EXPECT_EQ(meta.at("layout"), "zigzag");
  std::filesystem::remove_all(dir);
}

TEST(CliRun, InjectedStallExitsThreeNamingRankAndOp) {
  const auto r = run(kSmall + " --algo ring --ranks 4 --pass fwd --inject-stall --timeout-s 1");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("stall"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recv"), std::string::npos) << r.out;
}

TEST(CliRun, OneComputeLongerThanTheTimeoutIsNoStall) {
  // Each block here computes for a few hundred ms, far past --timeout-s: a running
  // op is progress, and the run must finish and check, not end as a stall.
  const auto r = run("run --backend threads --algo ring --ranks 2 --seq 8k --heads 1 --head-dim 16 --dtype fp32 "
                     "--timeout-s 0.02 --check --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(nlohmann::json::parse(r.out).at("ok").get<bool>()) << r.out;
}

TEST(CliRun, WrongNumbersExitOne) {
  const auto r = run(kSmall + " --algo rm+ --ranks 4 --pass both --check --inject-drop-compute --json");
  EXPECT_EQ(r.code, 1) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j.at("ok").get<bool>());
  EXPECT_GT(j.at("max_rel_err").at("out").get<double>(), 1e-5);
}

TEST(CliRun, AVanishingReferenceIsJudgedByItsAbsoluteError) {
  // A window of one token: each query sees only itself, its softmax is 1 and dQ is exactly 0
  // in the reference, while the run's fp32 rounding leaves about 1e-7. Over a reference of 0
  // the ratio was 1e+23 and a correct run failed; the error is absolute there (scale 1).
  const auto r = run(kSmall + " --algo ring --ranks 2 --mask sliding:1 --pass both --check --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("ref_scale").at("dq").get<double>(), 1.0);
  EXPECT_EQ(j.at("max_rel_err").at("dq").get<double>(), j.at("max_abs_err").at("dq").get<double>());
  EXPECT_LE(j.at("max_rel_err").at("dq").get<double>(), j.at("tolerance").get<double>());
  // The text shows the compared figure beside the tolerance, after the scale it is measured on.
  const auto t = run(kSmall + " --algo ring --ranks 2 --mask sliding:1 --pass both --check");
  ASSERT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("max_abs_err  ref_scale  max_rel_err  tolerance"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("check PASSED"), std::string::npos) << t.out;
}

TEST(CliRun, AnOutputOnlyAnotherBackendWritesIsRefused) {
  // --append-measurements is the cuda backends' (an unknown flag where they are not built): the
  // threads backend used to run and leave the file unwritten, exit 0.
  const auto dir = charm::test::temp_path("append_measurements");
  std::filesystem::create_directories(dir);
  const auto r = run(kSmall + " --algo ring --ranks 2 --append-measurements " + dir + "/m.csv");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--append-measurements"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/m.csv"));
}

TEST(CliRun, BadFlagsExitTwo) {
  EXPECT_EQ(run(kSmall + " --algo ring --ranks 4 --backend carrier-pigeon").code, 2);
  EXPECT_EQ(run(kSmall + " --algo merge --ranks 6").code, 2);
  EXPECT_EQ(run(kSmall + " --algo ring --ranks 4 --no-such-flag").code, 2);
}

}  // namespace
