#include <gtest/gtest.h>

#include <set>

#include "scheduler/planners/comm_list.hpp"

using charm::sched::generate_comm_list;

TEST(CommList, PaperExampleEightRanks) {
  // Algorithm 1 of the paper: for n = 8, rank 3: kv [2], [1], [6, 7]; q [0], [4, 5].
  const auto l = generate_comm_list(3, 8);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0].kv, (std::vector<int>{2}));
  EXPECT_TRUE(l[0].q.empty());
  EXPECT_EQ(l[1].kv, (std::vector<int>{1}));
  EXPECT_EQ(l[1].q, (std::vector<int>{0}));
  EXPECT_EQ(l[2].kv, (std::vector<int>{6, 7}));
  EXPECT_EQ(l[2].q, (std::vector<int>{4, 5}));
}

TEST(CommList, AppendixExample) {
  // Appendix A: GPUs 0 and 1 talking to 2 and 3: GPU 0 sends kv to 2 and q to 3; GPU 1 the reverse.
  EXPECT_EQ(generate_comm_list(0, 4)[1].kv, (std::vector<int>{2}));
  EXPECT_EQ(generate_comm_list(0, 4)[1].q, (std::vector<int>{3}));
  EXPECT_EQ(generate_comm_list(1, 4)[1].kv, (std::vector<int>{3}));
  EXPECT_EQ(generate_comm_list(1, 4)[1].q, (std::vector<int>{2}));
}

class CommListSizes : public ::testing::TestWithParam<int> {};

TEST_P(CommListSizes, SymmetricCompleteAndBitStructured) {
  const int n = GetParam();
  std::vector<std::vector<charm::sched::CommLevel>> all;
  for (int x = 0; x < n; ++x) all.push_back(generate_comm_list(x, n));
  for (int x = 0; x < n; ++x) {
    const auto& lx = all[std::size_t(x)];
    int levels = 0;
    while ((1 << levels) < n) ++levels;
    ASSERT_EQ(int(lx.size()), levels);
    std::set<int> seen;
    for (int i = 0; i < levels; ++i) {
      const auto& lv = lx[std::size_t(i)];
      const std::size_t m = i == 0 ? 1 : std::size_t(1) << (i - 1);
      EXPECT_EQ(lv.kv.size(), m);
      EXPECT_EQ(lv.q.size(), i == 0 ? 0 : m);
      for (int y : lv.kv) {
        EXPECT_TRUE(seen.insert(y).second) << "rank " << x << " meets " << y << " twice";
        // Symmetry: y lists x at the same level, as a kv partner.
        const auto& ly = all[std::size_t(y)][std::size_t(i)].kv;
        EXPECT_NE(std::find(ly.begin(), ly.end(), x), ly.end()) << x << " kv " << y;
        // Level i+1 partners differ in bit i; kv partners agree on bit i-1.
        EXPECT_EQ((x ^ y) >> i, 1);
        if (i > 0) {
          EXPECT_EQ(((x ^ y) >> (i - 1)) & 1, 0);
        }
      }
      for (int y : lv.q) {
        EXPECT_TRUE(seen.insert(y).second) << "rank " << x << " meets " << y << " twice";
        const auto& ly = all[std::size_t(y)][std::size_t(i)].q;
        EXPECT_NE(std::find(ly.begin(), ly.end(), x), ly.end()) << x << " q " << y;
        EXPECT_EQ((x ^ y) >> i, 1);
        EXPECT_EQ(((x ^ y) >> (i - 1)) & 1, 1);
      }
      EXPECT_TRUE(std::is_sorted(lv.kv.begin(), lv.kv.end()));
      EXPECT_TRUE(std::is_sorted(lv.q.begin(), lv.q.end()));
    }
    EXPECT_EQ(int(seen.size()), n - 1);  // everyone else exactly once
    EXPECT_EQ(seen.count(x), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(PowersOfTwo, CommListSizes, ::testing::Values(2, 4, 8, 16, 32, 64, 128, 256, 512, 1024));
