// The charm CLI: commlist, plan, validate, and the exit codes of bad input.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "scheduler/ir/plan_io.hpp"
#include "test_util.hpp"

using charm::test::run_charm;

TEST(CliCommlist, MatchesAlgorithm1) {
  auto r = run_charm("commlist --ranks 8 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ranks"], 8);
  const auto& l3 = j["lists"][3];
  EXPECT_EQ(l3["rank"], 3);
  EXPECT_EQ(l3["levels"][0]["kv"], nlohmann::json({2}));
  EXPECT_EQ(l3["levels"][0]["q"], nlohmann::json::array());
  EXPECT_EQ(l3["levels"][1]["kv"], nlohmann::json({1}));
  EXPECT_EQ(l3["levels"][1]["q"], nlohmann::json::array({0}));  // json({0}) is null under clang (0 converts to nullptr)
  EXPECT_EQ(l3["levels"][2]["kv"], nlohmann::json({6, 7}));
  EXPECT_EQ(l3["levels"][2]["q"], nlohmann::json({4, 5}));
  r = run_charm("commlist --ranks 1024 --json");
  ASSERT_EQ(r.code, 0);
  EXPECT_EQ(nlohmann::json::parse(r.out)["lists"].size(), 1024u);
}

TEST(CliPlan, WritesAPlanThatValidates) {
  const auto out = charm::test::temp_path("plan.json"), dot = charm::test::temp_path("plan.dot");
  auto r = run_charm(
      "plan --algo charm --ranks 8 --domains 2 --batch 1 --seq 4k --heads 4 --head-dim 64 --dtype bf16 --causal "
      "--layout zigzag --pass both --out " +
      out + " --dot " + dot);
  ASSERT_EQ(r.code, 0) << r.out;
  r = run_charm("validate " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("valid: charm both 8 ranks x 2 domain(s)", 0), 0u) << r.out;
  std::ifstream d(dot);
  std::string first;
  std::getline(d, first);
  EXPECT_EQ(first, "digraph plan {");
}

TEST(CliValidate, BrokenPlanExitsOneAndNamesTheRule) {
  const auto out = charm::test::temp_path("broken.json");
  ASSERT_EQ(run_charm("plan --algo ring --ranks 4 --seq 1k --out " + out).code, 0);
  auto j = nlohmann::json::parse(std::ifstream(out));
  // Drop the first send.
  auto& ops = j["ops"];
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i]["kind"] == "send") {
      ops[i]["kind"] = "copy";  // no longer a send: its receive is left alone
      ops[i]["bufs"] = {ops[i]["bufs"][0], ops[i]["bufs"][0]};
      break;
    }
  std::ofstream(out) << j.dump();
  auto r = run_charm("validate " + out);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(r.out.rfind("invalid: [matching]", 0), 0u) << r.out;
}

TEST(CliErrors, BadInputExitsTwoWithOneLine) {
  struct Case {
    std::string args, expect;
  };
  // Each case fails before writing; the output path is a regular file's (devices such as /dev/null are refused).
  const std::string out = charm::test::temp_path("never-written.json");
  const std::vector<Case> cases = {
      {"plan --algo ring --ranks 4 --out " + out + " --frobnicate", "--frobnicate"},
      {"plan --algo merge --ranks 6 --seq 6k --out " + out, "--ranks: merge needs a power-of-two rank count, got 6"},
      {"plan --algo ring --ranks 8 --seq 1000 --layout zigzag --out " + out,
       "--seq: sequence length 1000 cannot be split"},
      {"plan --algo ring --ranks 4 --heads 6 --kv-heads 4 --out " + out, "--kv-heads"},
      {"plan --algo ring --ranks 4 --dtype fp8 --out " + out, "--dtype: unknown dtype 'fp8'"},
      {"plan --algo bogus --ranks 4 --out " + out, "--algo: unknown algorithm 'bogus'"},
      {"plan --algo ring --ranks 4 --seq 12q --out " + out, "--seq: unknown size suffix"},
      {"plan --algo ring --ranks 4 --out /nonexistent-dir/plan.json",
       "/nonexistent-dir/plan.json: cannot open for writing"},
      {"validate /nonexistent/plan.json", "/nonexistent/plan.json: cannot open for reading"},
      {"commlist --ranks 6", "--ranks: GenerateCommList needs a power-of-two"},
  };
  for (const auto& c : cases) {
    auto r = run_charm(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("charm: error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    EXPECT_FALSE(std::filesystem::exists(out)) << c.args;
  }
}

TEST(CliErrors, MalformedPlanJson) {
  const auto out = charm::test::temp_path("bad.json");
  std::ofstream(out) << "{\"schema\": 1, \"algo\": ";
  auto r = run_charm("validate " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("malformed JSON"), std::string::npos) << r.out;
}

// A start sets up only the subcommand it names: each one that --help lists must be found by its own name.
TEST(CliConventions, EverySubcommandStartsByItsName) {
  const auto all = run_charm("--help");
  ASSERT_EQ(all.code, 0) << all.out;
  std::istringstream lines(all.out.substr(all.out.find("Subcommands:")));
  std::string line;
  std::getline(lines, line);
  int seen = 0;
  while (std::getline(lines, line) && !line.empty()) {
    const std::string name = line.substr(2, line.find(' ', 2) - 2);
    const auto r = run_charm(name + " --help");
    EXPECT_EQ(r.code, 0) << name << ": " << r.out;
    EXPECT_NE(r.out.find("Usage: charm " + name + " "), std::string::npos) << name << ": " << r.out;
    ++seen;
  }
  EXPECT_GE(seen, 14) << all.out;
}

TEST(CliConventions, VersionAndNamesInAnyCase) {
  auto v = run_charm("--version");
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind("charm 0.", 0), 0u) << v.out;
  EXPECT_NE(v.out.find("commit "), std::string::npos) << v.out;
  // "Ring" is ring: the plan is the same one.
  const std::string dir = charm::test::temp_dir() + "/";
  auto a = run_charm("plan --algo Ring --ranks 4 --seq 4k --out " + dir + "charm_Ring.json");
  auto b = run_charm("plan --algo ring --ranks 4 --seq 4k --out " + dir + "charm_ring.json");
  ASSERT_EQ(a.code, 0) << a.out;
  ASSERT_EQ(b.code, 0) << b.out;
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(slurp(dir + "charm_Ring.json"), slurp(dir + "charm_ring.json"));
  // An output through a link that leads to no file (stdout is a pipe here) is refused, and the
  // link is left as it was: it once replaced /dev/stdout with a regular file.
  auto c = run_charm("plan --algo ring --ranks 4 --seq 4k --out /dev/stdout");
  EXPECT_EQ(c.code, 2) << c.out;
  EXPECT_TRUE(std::filesystem::is_symlink("/dev/stdout"));
}
