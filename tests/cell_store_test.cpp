// The validator's coverage cells (scheduler/validate/cell_store.hpp): sets of
// blocks that turn into bitmaps once their runs fragment, with the same answers.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "scheduler/validate/cell_store.hpp"

using charm::sched::Cell;
using charm::sched::CellStore;
using charm::sched::IntervalSet;

namespace {
IntervalSet of(const std::set<std::int32_t>& s) {
  IntervalSet r;
  for (auto e : s) r.append(e, e + 1);
  return r;
}
}  // namespace

TEST(CellStore, AddReportsRepeatsBeforeAndAfterTheBitmap) {
  CellStore cs;
  cs.reset(2, 1000, true);
  std::set<std::int32_t> want;
  // Every third block: runs fragment past 32, so the cell becomes a bitmap on the way.
  for (std::int32_t e = 0; e < 999; e += 3) {
    EXPECT_TRUE(cs.add(cs[0], e));
    want.insert(e);
  }
  EXPECT_GE(cs[0].dense, 0);
  EXPECT_FALSE(cs.add(cs[0], 3));
  EXPECT_TRUE(cs.same_blocks(cs[0], of(want)));
  EXPECT_EQ(cs.blocks_of(cs[0]), of(want));
  // A few runs stay runs.
  for (std::int32_t e = 10; e < 20; ++e) EXPECT_TRUE(cs.add(cs[1], e));
  EXPECT_LT(cs[1].dense, 0);
  EXPECT_FALSE(cs.add(cs[1], 15));
}

TEST(CellStore, MergeAndAssignMatchASetOfInts) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    CellStore cs;
    cs.reset(3, 256, true);
    std::set<std::int32_t> a, b;
    for (int k = 0; k < 120; ++k) {
      const auto x = std::int32_t(rng() % 256), y = std::int32_t(rng() % 256);
      if (a.insert(x).second) cs.add(cs[0], x);
      if (b.insert(y).second) cs.add(cs[1], y);
    }
    std::set<std::int32_t> both;
    for (auto e : b)
      if (a.count(e)) both.insert(e);
    const IntervalSet overlap = cs.merge(cs[0], cs[1]);
    EXPECT_EQ(overlap, of(both));
    a.insert(b.begin(), b.end());
    EXPECT_TRUE(cs.same_blocks(cs[0], of(a)));
    cs[0].written = true;
    cs.assign(cs[2], cs[0]);  // a copy, not a shared bitmap
    EXPECT_TRUE(cs[2].written);
    cs.add(cs[0], 0), cs.add(cs[0], 255);
    EXPECT_TRUE(cs.same_blocks(cs[2], of(a)));
  }
}
