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
//
// parallel_for_watched is the same loop for long tasks: each worker thread keeps a state of its own across its
// tasks (a cache), a stop predicate ends the loop between tasks (a signal), and the caller's thread runs no
// task but watches, calling the observer at a fixed period while tasks run, so a progress line moves during
// a task of minutes.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
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

/// body(i, state) once for every i in [0, n) not skipped by `stop`, on `jobs` worker threads, each with its own
/// `State` (made on that thread, kept across its tasks); `stop()` is asked before every task (once it says
/// true, no task starts). The caller's thread waits, calling observer(done, n) every `period` and once when
/// the workers are joined. Returns the tasks done; the first exception of a body is rethrown after the join.
template <class State, class Body, class Stop, class Observer>
std::size_t parallel_for_watched(std::size_t n, int jobs, Body&& body, Stop&& stop, Observer&& observer,
                                 std::chrono::milliseconds period) {
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex mu;
  std::condition_variable cv;
  FirstException failure;
  const auto stopped = [&] { return failure.failed() || stop(); };
  auto work = [&] {
    State state{};
    for (std::size_t i; !stopped() && (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) {
      body(i, state);
      if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
        const std::lock_guard lock(mu);
        cv.notify_all();
      }
    }
  };
  const auto threads = static_cast<std::size_t>(std::max(1, jobs));
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 0; t < std::min(threads, std::max<std::size_t>(n, 1)); ++t)
      pool.emplace_back([&] { failure.run(work); });
    std::unique_lock lock(mu);
    while (done.load() < n && !stopped()) {
      cv.wait_for(lock, period);
      observer(done.load(), n);
    }
  }
  failure.rethrow();
  observer(done.load(), n);
  return done.load();
}

}  // namespace charm
