#pragma once
// EventQueue: a 4-ary min-heap of timed events, O(log n) push and pop.
// Ties break by insertion order, so a simulation is deterministic: (time, seq)
// is a total order, so events leave in one order whatever the heap's shape.
// One queue per simulation: no global state.

#include <bit>
#include <cassert>
#include <cstdint>
#include <vector>

namespace charm::sim {

struct Event {
  double time_s;
  std::uint64_t seq;
  std::uint32_t kind;
  std::int32_t id;
  std::uint32_t version;
};

class EventQueue {
 public:
  void push(double time_s, std::uint32_t kind, std::int32_t id, std::uint32_t version = 0) {
    assert(time_s >= 0);
    heap_.push_back(Event{time_s + 0.0, next_seq_++, kind, id, version});  // -0 + 0 is +0
    sift_up(heap_.size() - 1);
  }
  [[nodiscard]] bool empty() const { return heap_.empty(); }
  [[nodiscard]] std::size_t size() const { return heap_.size(); }
  [[nodiscard]] const Event& top() const { return heap_.front(); }
  Event pop() {
    Event e = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) sift_down(0);
    return e;
  }
  void reserve(std::size_t n) { heap_.reserve(n); }

 private:
  static constexpr std::size_t kArity = 4;  // half the levels of a binary heap, children in one or two cache lines
  // Without branches: which of two events comes first is data the CPU cannot predict. Times are never
  // negative (push turns -0 into +0), and the bits of non-negative doubles order as their values do, so
  // (time, seq) compare as two unsigned integers (no floating-point compare and parity flag).
  static bool less(const Event& a, const Event& b) {
    const auto ta = std::bit_cast<std::uint64_t>(a.time_s), tb = std::bit_cast<std::uint64_t>(b.time_s);
    return (ta < tb) | ((ta == tb) & (a.seq < b.seq));
  }
  void sift_up(std::size_t i) {
    const Event e = heap_[i];
    while (i > 0) {
      const std::size_t p = (i - 1) / kArity;
      if (!less(e, heap_[p])) break;
      heap_[i] = heap_[p];
      i = p;
    }
    heap_[i] = e;
  }
  void sift_down(std::size_t i) {
    const std::size_t n = heap_.size();
    const Event e = heap_[i];
    for (;;) {
      const std::size_t first = kArity * i + 1;
      if (first >= n) break;
      std::size_t c = first;
      const std::size_t end = first + kArity < n ? first + kArity : n;
      for (std::size_t k = first + 1; k < end; ++k) c = less(heap_[k], heap_[c]) ? k : c;
      if (!less(heap_[c], e)) break;
      heap_[i] = heap_[c];
      i = c;
    }
    heap_[i] = e;
  }

  std::vector<Event> heap_;
  std::uint64_t next_seq_ = 0;
};

}  // namespace charm::sim
