// Golden files of the commands' text output: what a user reads, byte for byte. A change that moves a
// figure or a line shows up here as a diff. After a deliberate change, regenerate them with
//   CHARM_GOLDEN_UPDATE=1 build/tests/golden_test
// and review the diff of tests/data/golden/ like any other change. Lines with wall-clock figures
// ("... simulations in 0.01 s") are left out of the comparison.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

struct Golden {
  const char* file;
  const char* args;
};

// The README's main job and the runs its text shows, on the calibrated presets.
constexpr Golden kGolden[] = {
    // Its algorithms named, so that a new one adds no line here.
    {"advise-h100-2x8.txt", "advise -t topologies/h100-2x8.json --batch 16 --seq 26880 --heads 12 --head-dim 192 -j 2 "
                            "--algos ring,ring-zigzag,merge,rm+,charm,allgather-kv,tasp,tasp-zigzag,ulysses,usp"},
    {"compare-h100-2x8.txt", "compare -t topologies/h100-2x8.json --batch 16 --seq 26880 --heads 12 --head-dim 192 "
                             "--algos ring,merge,rm+,charm"},
    {"simulate-charm-h100-4x8.txt",
     "simulate -t topologies/h100-4x8.json --algo charm --batch 16 --seq 31744 --heads 12 --head-dim 192 --pass both"},
    {"simulate-ring-causal-l20.txt",
     "simulate -t topologies/l20-8-2numa.json --algo ring --seq 64k --heads 32 --causal --layout zigzag --links"},
    {"simulate-uniform-rmplus.txt", "simulate --uniform --ranks 16 --bw-gbps 50 --tflops 400 --algo rm+ --seq 64k"},
    {"simulate-deployment.txt",
     "simulate -t topologies/h100-4x8.json --cp 16 --tp 2 --algo charm -b 16 -s 32k --heads 12 --head-dim 192"},
};

std::string run(const std::string& args) {
  const std::string cmd = "cd " + std::string(CHARM_SOURCE_DIR) + " && " + CHARM_BIN + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string s;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) s += buf.data();
  const int st = pclose(p);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << args << "\n" << s;
  return s;
}

/// The text without the lines that carry wall-clock figures.
std::string stable(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (line.find(" simulations in ") == std::string::npos) out += line + "\n";
  return out;
}

std::string path_of(const char* file) { return fmt::format("{}/tests/data/golden/{}", CHARM_SOURCE_DIR, file); }

class GoldenOutput : public ::testing::TestWithParam<Golden> {};

TEST_P(GoldenOutput, IsTheFileByteForByte) {
  const Golden& g = GetParam();
  const std::string got = stable(run(g.args));
  if (std::getenv("CHARM_GOLDEN_UPDATE") != nullptr) {
    std::ofstream(path_of(g.file), std::ios::binary) << got;
    GTEST_SKIP() << "wrote " << path_of(g.file);
  }
  std::ifstream in(path_of(g.file), std::ios::binary);
  ASSERT_TRUE(in.good()) << path_of(g.file) << " is missing: CHARM_GOLDEN_UPDATE=1 build/tests/golden_test";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(got, want.str())
      << "charm " << g.args << "\nno longer prints " << g.file
      << "; if the change is meant, regenerate with CHARM_GOLDEN_UPDATE=1 build/tests/golden_test";
}

std::string name(const ::testing::TestParamInfo<Golden>& i) {
  std::string n = i.param.file;
  n = n.substr(0, n.find('.'));
  for (auto& c : n)
    if (c == '-') c = '_';
  return n;
}

INSTANTIATE_TEST_SUITE_P(Commands, GoldenOutput, ::testing::ValuesIn(kGolden), name);

}  // namespace
