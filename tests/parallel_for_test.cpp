// parallel_for: every index once, whatever the job count; the first exception reaches the caller;
// the observer runs on the caller's thread only.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "support/parallel_for.hpp"

namespace charm {
namespace {

TEST(ParallelFor, EachIndexOnceWhateverTheJobCount) {
  for (int jobs : {1, 2, 3, 8}) {
    std::vector<int> hits(1000, 0);
    parallel_for(hits.size(), jobs, [&](std::size_t i) { ++hits[i]; });
    for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "index " << i << ", jobs " << jobs;
  }
  int calls = 0;
  parallel_for(0, 4, [&](std::size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ParallelFor, TheFirstExceptionReachesTheCaller) {
  for (int jobs : {1, 2}) {
    std::atomic<int> ran{0};
    EXPECT_THROW(parallel_for(100, jobs,
                              [&](std::size_t i) {
                                ++ran;
                                if (i == 10) throw std::runtime_error("task 10");
                              }),
                 std::runtime_error);
    // Alone, the caller stops at once; with others, how far they got is a matter of timing.
    if (jobs == 1) {
      EXPECT_EQ(ran.load(), 11);
    }
  }
}

TEST(ParallelFor, ObserverOnTheCallersThreadWithACountThatOnlyGrows) {
  const auto caller = std::this_thread::get_id();
  std::size_t last = 0;
  bool elsewhere = false, shrank = false;
  parallel_for(
      200, 3, [](std::size_t) {},
      [&](std::size_t done, std::size_t total) {
        elsewhere = elsewhere || std::this_thread::get_id() != caller || total != 200;
        shrank = shrank || done < last;
        last = done;
      });
  EXPECT_FALSE(elsewhere);
  EXPECT_FALSE(shrank);
  EXPECT_LE(last, 200u);
}

// parallel_for_watched: a state per worker kept across its tasks, a stop between tasks, and a caller that
// only watches, at a period, while a task runs.

/// What one worker saw: the thread it ran on and how many tasks it ran with this state.
struct WorkerState {
  std::thread::id thread;
  int tasks = 0;
};

TEST(ParallelForWatched, EachIndexOnceAndEachStateOnOneThread) {
  for (int jobs : {1, 2, 4}) {
    std::vector<int> hits(500, 0);
    std::atomic<int> foreign{0};
    const auto n = parallel_for_watched<WorkerState>(
        hits.size(), jobs,
        [&](std::size_t i, WorkerState& s) {
          if (s.tasks++ == 0) s.thread = std::this_thread::get_id();
          if (s.thread != std::this_thread::get_id()) ++foreign;
          ++hits[i];
        },
        [] { return false; }, [](std::size_t, std::size_t) {}, std::chrono::milliseconds(10));
    EXPECT_EQ(n, hits.size());
    for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "index " << i << ", jobs " << jobs;
    EXPECT_EQ(foreign.load(), 0) << "a worker's state reached another thread";
  }
}

TEST(ParallelForWatched, AStopLeavesTheTasksNotStartedUndone) {
  std::atomic<bool> stop{false};
  std::vector<int> hits(100, 0);
  const auto n = parallel_for_watched<WorkerState>(
      hits.size(), 1,
      [&](std::size_t i, WorkerState&) {
        ++hits[i];
        if (i == 10) stop = true;
      },
      [&] { return stop.load(); }, [](std::size_t, std::size_t) {}, std::chrono::milliseconds(10));
  EXPECT_EQ(n, 11u);
  EXPECT_EQ(hits[10], 1);
  EXPECT_EQ(hits[11], 0);
}

TEST(ParallelForWatched, TheCallerWatchesDuringALongTaskAndOnceAtTheEnd) {
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> released{false};
  std::vector<std::size_t> seen;
  bool elsewhere = false;
  parallel_for_watched<WorkerState>(
      2, 2,
      [&](std::size_t, WorkerState&) {
        while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      [] { return false; },
      [&](std::size_t done, std::size_t total) {
        elsewhere = elsewhere || std::this_thread::get_id() != caller || total != 2;
        seen.push_back(done);
        if (seen.size() == 3) released = true;  // three calls while both tasks still run
      },
      std::chrono::milliseconds(5));
  EXPECT_FALSE(elsewhere);
  ASSERT_GE(seen.size(), 4u);
  EXPECT_EQ(seen[0], 0u);
  EXPECT_EQ(seen[2], 0u);
  EXPECT_EQ(seen.back(), 2u);
}

TEST(ParallelForWatched, TheFirstExceptionReachesTheCaller) {
  EXPECT_THROW(parallel_for_watched<WorkerState>(
                   50, 2,
                   [](std::size_t i, WorkerState&) {
                     if (i == 7) throw std::runtime_error("task 7");
                   },
                   [] { return false; }, [](std::size_t, std::size_t) {}, std::chrono::milliseconds(10)),
               std::runtime_error);
}

}  // namespace
}  // namespace charm
