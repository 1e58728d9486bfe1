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
      q.push(t, 3, id);
      ref.emplace_back(t, seq++, id++);
      continue;
    }
    const auto least = std::min_element(ref.begin(), ref.end());
    const Event e = q.pop();
    ASSERT_EQ(e.time_s, std::get<0>(*least)) << "step " << step;
    ASSERT_EQ(e.seq, std::get<1>(*least)) << "step " << step;
    ASSERT_EQ(e.id, std::get<2>(*least)) << "step " << step;
    ASSERT_EQ(e.kind, 3u);
    ASSERT_EQ(e.key, EventQueue::kNoKey);
    ref.erase(least);
  }
  std::sort(ref.begin(), ref.end());
  for (const auto& r : ref) ASSERT_EQ(q.pop().id, std::get<2>(r));
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, KeyedEventsLeaveAsAFreshPushWouldWithTheOldOneSkipped) {
  // What a keyed event replaces: a new push for each move, the earlier one left behind and skipped
  // when it comes out (a simulator's stale drain events). Both queues must give the same live events
  // in the same order, seq for seq, under random pushes, moves, erases and pops.
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> time(0, 30), action(0, 5);
  EventQueue keyed, lazy;
  struct Live {
    std::uint32_t key;
    std::uint64_t lazy_seq;  // the seq of its newest push into `lazy`
  };
  std::vector<std::pair<int, Live>> live;  // id -> its keyed event
  std::vector<std::uint64_t> dead;         // seqs of `lazy`'s superseded events, skipped as they leave
  int id = 0;
  double now = 0;
  std::uint64_t lazy_seq = 0;  // EventQueue numbers pushes from 0
  auto find = [&](int i) {
    return std::find_if(live.begin(), live.end(), [&](const auto& p) { return p.first == i; });
  };
  auto is_dead = [&](const Event& e) { return std::find(dead.begin(), dead.end(), e.seq) != dead.end(); };
  for (int step = 0; step < 30000; ++step) {
    const int a = action(rng);
    if (live.empty() || a <= 1) {  // a new keyed event, and a plain one beside it
      const double t = now + 0.5 * time(rng);
      live.push_back({id, {keyed.push_keyed(t, 1, id), lazy_seq++}});
      lazy.push(t, 1, id);
      keyed.push(t, 2, -1);
      lazy.push(t, 2, -1);
      ++lazy_seq;
      ++id;
    } else if (a <= 3) {  // a move
      auto& [i, l] = live[std::size_t(rng() % live.size())];
      const double t = now + 0.5 * time(rng);
      keyed.move(l.key, t);
      dead.push_back(l.lazy_seq);
      l.lazy_seq = lazy_seq++;
      lazy.push(t, 1, i);
    } else if (a == 4) {  // an erase
      const auto it = live.begin() + std::ptrdiff_t(rng() % live.size());
      keyed.erase(it->second.key);
      dead.push_back(it->second.lazy_seq);
      live.erase(it);
    } else {  // a pop from each: the same live event
      Event l = lazy.pop();
      while (is_dead(l)) l = lazy.pop();
      const Event k = keyed.pop();
      ASSERT_EQ(k.time_s, l.time_s) << "step " << step;
      ASSERT_EQ(k.seq, l.seq) << "step " << step;
      ASSERT_EQ(k.id, l.id) << "step " << step;
      ASSERT_EQ(k.kind, l.kind) << "step " << step;
      now = k.time_s;
      if (k.kind == 1) {
        const auto it = find(k.id);
        ASSERT_NE(it, live.end());
        ASSERT_EQ(k.key, it->second.key);
        live.erase(it);
      } else {
        ASSERT_EQ(k.key, EventQueue::kNoKey);
      }
    }
  }
  while (!keyed.empty()) {
    Event l = lazy.pop();
    while (is_dead(l)) l = lazy.pop();
    ASSERT_EQ(keyed.pop().seq, l.seq);
  }
  while (!lazy.empty()) ASSERT_TRUE(is_dead(lazy.pop()));  // only superseded events were left behind
}

}  // namespace
}  // namespace charm::sim
