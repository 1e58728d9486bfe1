// The simulator's event queue: events leave in (time, insertion) order whatever the heap's shape,
// which is what makes every simulation deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "sim/event_queue.hpp"

namespace charm::sim {
namespace {

TEST(EventQueue, EqualTimesLeaveInTheOrderTheyCame) {
  EventQueue q;
  for (int i = 0; i < 10; ++i) q.push(1.0, 0, i);
  q.push(0.5, 1, 100);
  EXPECT_EQ(q.size(), 11u);
  EXPECT_EQ(q.top().id, 100);
  EXPECT_EQ(q.pop().id, 100);
  for (int i = 0; i < 10; ++i) {
    const Event e = q.pop();
    EXPECT_EQ(e.id, i);
    EXPECT_EQ(e.time_s, 1.0);
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, MatchesASortedReferenceUnderRandomPushesAndPops) {
  // Random times from a small set (many ties), pushes interleaved with pops, as a simulation
  // does; every pop must be the least (time, seq) still held.
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> time(0, 20), action(0, 2);
  EventQueue q;
  std::vector<std::tuple<double, std::uint64_t, int>> ref;  // (time, seq, id)
  std::uint64_t seq = 0;
  int id = 0;
  for (int step = 0; step < 20000; ++step) {
    if (ref.empty() || action(rng) != 0) {
      const double t = 0.25 * time(rng);
      q.push(t, 3, id, 7);
      ref.emplace_back(t, seq++, id++);
      continue;
    }
    const auto least = std::min_element(ref.begin(), ref.end());
    const Event e = q.pop();
    ASSERT_EQ(e.time_s, std::get<0>(*least)) << "step " << step;
    ASSERT_EQ(e.seq, std::get<1>(*least)) << "step " << step;
    ASSERT_EQ(e.id, std::get<2>(*least)) << "step " << step;
    ASSERT_EQ(e.kind, 3u);
    ASSERT_EQ(e.version, 7u);
    ref.erase(least);
  }
  std::sort(ref.begin(), ref.end());
  for (const auto& r : ref) ASSERT_EQ(q.pop().id, std::get<2>(r));
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace charm::sim
