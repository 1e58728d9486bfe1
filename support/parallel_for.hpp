#pragma once
// parallel_for: the project's one way to spread independent tasks over threads.
//
// body(i) runs once for every i in [0, n), on up to `jobs` threads of which the caller's is one.
// Tasks are handed out in index order, one at a time (a slow task does not hold up a block of
// others). A body that writes only its own slot of an output gives the same output whatever the
// job count: reductions belong after the loop, in index order. The first exception stops the
// threads that have not started their next task and is rethrown here once all are joined
// (FirstException); an observer, where given, is called on the caller's thread only, after each
// task the caller ran, with the tasks done so far (progress lines belong there, not in the body).

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <thread>
#include <vector>

#include "support/first_exception.hpp"

namespace charm {

struct NoObserver {
  void operator()(std::size_t /*done*/, std::size_t /*total*/) const {}
};

template <class Body, class Observer = NoObserver>
void parallel_for(std::size_t n, int jobs, Body&& body, Observer&& observer = {}) {
  if (n == 0) return;
  std::atomic<std::size_t> next{0}, done{0};
  FirstException failure;
  auto work = [&](bool caller) {
    for (std::size_t i; !failure.failed() && (i = next.fetch_add(1)) < n;) {
      body(i);
      const std::size_t d = done.fetch_add(1) + 1;
      if (caller) observer(d, n);
    }
  };
  const auto threads = static_cast<std::size_t>(std::max(1, jobs));
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 1; t < std::min(threads, n); ++t)
      pool.emplace_back([&] { failure.run([&] { work(false); }); });
    failure.run([&] { work(true); });
  }
  failure.rethrow();
}

}  // namespace charm
