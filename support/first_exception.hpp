#pragma once
// The first exception of a pool of worker threads, carried to the thread that waits for them.
//
// An exception that leaves a thread's function ends the process in std::terminate ("terminate
// called after throwing an instance of 'std::bad_alloc'"). A worker runs its body through
// run(): the first exception is kept, failed() tells the others (and the waiting thread) to
// stop, and rethrow() raises it once the pool is joined, so that it reaches the one place that
// reports it (an allocation that fails is "out of memory", exit 3).

#include <atomic>
#include <exception>
#include <mutex>

namespace charm {

class FirstException {
 public:
  template <class Body>
  void run(Body&& body) noexcept {
    try {
      body();
    } catch (...) {
      const std::lock_guard lock(mu_);
      if (!first_) first_ = std::current_exception();
      failed_.store(true);
    }
  }
  [[nodiscard]] bool failed() const { return failed_.load(); }
  /// After the workers are joined.
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
  std::atomic<bool> failed_{false};
};

}  // namespace charm
