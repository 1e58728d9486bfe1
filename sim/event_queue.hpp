#pragma once
// EventQueue: a 4-ary min-heap of timed events, O(log n) push and pop.
// Ties break by insertion order, so a simulation is deterministic: (time, seq)
// is a total order, so events leave in one order whatever the heap's shape.
// A *keyed* event can be moved to another time in place (it takes a new seq,
// as a fresh push would) or taken out: an event that a later change makes
// obsolete, such as the drain of a flow whose rate changed, is replaced
// rather than left behind to be skipped, so the heap holds live events only.
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
  std::uint32_t key;  // EventQueue::kNoKey, or the handle of a keyed event
};

class EventQueue {
 public:
  static constexpr std::uint32_t kNoKey = UINT32_MAX;

  void push(double time_s, std::uint32_t kind, std::int32_t id) { insert(time_s, kind, id, kNoKey); }
  /// A keyed event: the returned key names it to move() and erase() until it leaves by pop() (whose event
  /// carries it) or erase(); then the key may be handed out again.
  std::uint32_t push_keyed(double time_s, std::uint32_t kind, std::int32_t id) {
    std::uint32_t key;
    if (!free_keys_.empty()) {
      key = free_keys_.back();
      free_keys_.pop_back();
    } else {
      key = static_cast<std::uint32_t>(key_pos_.size());
      key_pos_.push_back(0);
    }
    insert(time_s, kind, id, key);
    return key;
  }
  /// The keyed event to `time_s`, with a new seq: it leaves where a fresh push now would.
  void move(std::uint32_t key, double time_s) {
    assert(time_s >= 0);
    const std::size_t i = key_pos_[key];
    Event e = heap_[i];
    const bool earlier = less_time(time_s + 0.0, e.time_s);
    e.time_s = time_s + 0.0;
    e.seq = next_seq_++;
    heap_[i] = e;
    if (earlier)
      sift_up(i);
    else
      sift_down(i);  // later, or the same time with a later seq
  }
  /// Takes the keyed event out.
  void erase(std::uint32_t key) {
    const std::size_t i = key_pos_[key];
    free_keys_.push_back(key);
    const Event last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    const bool up = i > 0 && less(last, heap_[(i - 1) / kArity]);
    heap_[i] = last;
    if (up)
      sift_up(i);
    else
      sift_down(i);
  }
  [[nodiscard]] bool empty() const { return heap_.empty(); }
  [[nodiscard]] std::size_t size() const { return heap_.size(); }
  [[nodiscard]] const Event& top() const { return heap_.front(); }
  Event pop() {
    Event e = heap_.front();
    if (e.key != kNoKey) free_keys_.push_back(e.key);
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
  // (time, seq) compare as one 128-bit unsigned key, time's bits above seq: a compare and a subtract with
  // borrow, no floating-point compare and no branch (two 64-bit compares, and-ed, compiled to two branches).
  static bool less(const Event& a, const Event& b) { return key128(a) < key128(b); }
  __extension__ typedef unsigned __int128 Key128;  // GCC's and Clang's; the extension keeps -Wpedantic quiet
  static Key128 key128(const Event& e) {
    return (static_cast<Key128>(std::bit_cast<std::uint64_t>(e.time_s)) << 64) | e.seq;
  }
  static bool less_time(double a, double b) {
    return std::bit_cast<std::uint64_t>(a) < std::bit_cast<std::uint64_t>(b);
  }
  void insert(double time_s, std::uint32_t kind, std::int32_t id, std::uint32_t key) {
    assert(time_s >= 0);
    heap_.push_back(Event{time_s + 0.0, next_seq_++, kind, id, key});  // -0 + 0 is +0
    sift_up(heap_.size() - 1);
  }
  /// Puts e at place i, and tells its key where.
  void place(std::size_t i, const Event& e) {
    heap_[i] = e;
    if (e.key != kNoKey) key_pos_[e.key] = static_cast<std::uint32_t>(i);
  }
  void sift_up(std::size_t i) {
    const Event e = heap_[i];
    while (i > 0) {
      const std::size_t p = (i - 1) / kArity;
      if (!less(e, heap_[p])) break;
      place(i, heap_[p]);
      i = p;
    }
    place(i, e);
  }
  void sift_down(std::size_t i) {
    const std::size_t n = heap_.size();
    const Event e = heap_[i];
    for (;;) {
      const std::size_t first = kArity * i + 1;
      if (first >= n) break;
      std::size_t c = first;
      const std::size_t end = first + kArity < n ? first + kArity : n;
      for (std::size_t k = first + 1; k < end; ++k) {
        // c = less ? k : c, by masks: which child is least is data the branch predictor cannot learn.
        const std::size_t take = 0 - std::size_t(less(heap_[k], heap_[c]));
        c = (c & ~take) | (k & take);
      }
      if (!less(heap_[c], e)) break;
      place(i, heap_[c]);
      i = c;
    }
    place(i, e);
  }

  std::vector<Event> heap_;
  std::vector<std::uint32_t> key_pos_;    // per key: the keyed event's place in heap_
  std::vector<std::uint32_t> free_keys_;  // keys whose events left
  std::uint64_t next_seq_ = 0;
};

}  // namespace charm::sim
