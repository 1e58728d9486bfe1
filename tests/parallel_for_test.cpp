// parallel_for: every index once, whatever the job count; the first exception reaches the caller;
// the observer runs on the caller's thread only.
#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace charm
