// The counterparts table (sim/frameworks.hpp, from the algorithm table): one row per algorithm and layout,
// docs/algorithms.md holds the table as the code prints it, and charm advise prints and reports its best candidate's
// settings.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "scheduler/planners/planners.hpp"
#include "sim/frameworks.hpp"
#include "test_util.hpp"

namespace charm::sim {
namespace {

using ir::Layout;

TEST(Frameworks, EveryAlgorithmHasOneRowPerLayout) {
  // The rows come from the algorithm table; each candidate's lookup must find exactly one: either one
  // row for any layout, or one for each layout.
  for (const auto& a : sched::algorithm_names())
    for (const Layout l : {Layout::Contiguous, Layout::Zigzag}) {
      int found = 0;
      for (const auto& r : framework_table()) found += r.algo == a && (!r.layout || *r.layout == l) ? 1 : 0;
      EXPECT_EQ(found, 1) << a << " on " << ir::to_string(l);
    }
  for (const auto& r : framework_table())
    EXPECT_TRUE(bool(sched::resolve_algorithm(r.algo))) << r.algo << " is in the table but not an algorithm";
}

TEST(Frameworks, DocsHoldTheTable) {
  std::ifstream in(std::string(CHARM_SOURCE_DIR) + "/docs/algorithms.md");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(framework_table_markdown()), std::string::npos)
      << "docs/algorithms.md must hold this table verbatim:\n"
      << framework_table_markdown();
}

TEST(Frameworks, Settings) {
  // Ring: Megatron-LM's p2p; ring-flash-attention by layout; a causal contiguous ring is not Megatron's split.
  auto s = framework_settings("ring", Layout::Zigzag, true, 16, 2);
  EXPECT_EQ(s.megatron_args, "--context-parallel-size 16 --cp-comm-type p2p");
  EXPECT_EQ(s.te, "p2p");
  EXPECT_EQ(s.ring_flash_attn, "zigzag_ring_flash_attn");
  s = framework_settings("ring", Layout::Contiguous, false, 8, 1);
  EXPECT_EQ(s.megatron_args, "--context-parallel-size 8 --cp-comm-type p2p");
  EXPECT_EQ(s.ring_flash_attn, "ring_flash_attn");
  s = framework_settings("ring", Layout::Contiguous, true, 8, 1);
  EXPECT_TRUE(s.megatron_args.empty());
  EXPECT_EQ(s.ring_flash_attn, "ring_flash_attn");
  EXPECT_EQ(framework_settings("ring-zigzag", Layout::Zigzag, true, 8, 1).ring_flash_attn, "zigzag_ring_flash_attn");
  // All-gather: Megatron-LM spells it allgather, TransformerEngine all_gather; llama3_flash_attn takes contiguous
  // shards.
  s = framework_settings("allgather-kv", Layout::Contiguous, false, 8, 1);
  EXPECT_EQ(s.megatron_args, "--context-parallel-size 8 --cp-comm-type allgather");
  EXPECT_EQ(s.te, "all_gather");
  EXPECT_EQ(s.ring_flash_attn, "llama3_flash_attn");
  EXPECT_TRUE(framework_settings("allgather-kv", Layout::Zigzag, true, 8, 1).ring_flash_attn.empty());
  // Ulysses and USP: a2a, and a2a+p2p with the hierarchy's sizes (Ulysses degree first).
  EXPECT_EQ(framework_settings("ulysses", Layout::Contiguous, false, 8, 1).megatron_args,
            "--context-parallel-size 8 --cp-comm-type a2a");
  s = framework_settings("usp", Layout::Contiguous, false, 16, 4);
  EXPECT_EQ(s.megatron_args,
            "--context-parallel-size 16 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 4 4");
  EXPECT_EQ(s.te, "a2a+p2p");
  EXPECT_TRUE(s.ring_flash_attn.empty());
  EXPECT_EQ(framework_settings("usp", Layout::Contiguous, false, 16, 2).megatron_args,
            "--context-parallel-size 16 --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 8 2");
  // The paper's schedules and TASP have none.
  for (const char* a : {"charm", "rm+", "merge", "tasp", "tasp-zigzag"}) {
    s = framework_settings(a, Layout::Contiguous, false, 16, 2);
    EXPECT_TRUE(s.megatron_args.empty() && s.ring_flash_attn.empty()) << a;
    EXPECT_EQ(s.line().rfind("no counterpart in Megatron-LM/TE or ring-flash-attention", 0), 0u) << s.line();
  }
  EXPECT_EQ(framework_settings("ring", Layout::Zigzag, false, 16, 2).line(),
            "in Megatron-LM: --context-parallel-size 16 --cp-comm-type p2p (TransformerEngine cp_comm_type "
            "\"p2p\"); ring-flash-attention: zigzag_ring_flash_attn");
}

TEST(Frameworks, AdvisePrintsTheBestCandidatesSettings) {
  const std::string args = std::string("advise -t ") + CHARM_SOURCE_DIR +
                           "/topologies/h100-2x8.json --seq 8k --batch 1 --heads 16 --head-dim 128 --pass fwd "
                           "--algos ring,charm --jobs 2";
  const auto text = test::run_charm(args);
  ASSERT_EQ(text.code, 0) << text.out;
  const auto json = test::run_charm(args + " --json");
  ASSERT_EQ(json.code, 0) << json.out;
  const auto j = nlohmann::json::parse(json.out);
  const auto& best = j["candidates"][0];
  const auto expect =
      framework_settings(best["algo"].get<std::string>(), ir::parse_layout(best["layout"].get<std::string>()).value(),
                         false, j["topology"]["gpus"].get<int>(), best["domains"].get<int>());
  EXPECT_EQ(best["frameworks"]["line"], expect.line());
  EXPECT_NE(text.out.find("#   " + expect.line() + "\n"), std::string::npos) << text.out;
  for (const auto& c : j["candidates"]) EXPECT_TRUE(c["frameworks"].contains("megatron_lm"));
}

}  // namespace
}  // namespace charm::sim
