#pragma once
// EventQueue: a 4-ary min-heap of timed events, O(log n) push and pop.
// Ties break by insertion order, so a simulation is deterministic: (time, seq)
// is a total order, so events leave in one order whatever the heap's shape.
// A *keyed* event can be moved to another time in place (it takes a new seq,
// as a fresh push would) or taken out: an event that a later change makes
// obsolete, such as the drain of a flow whose rate changed, is replaced
// rather than left behind to be skipped, so the heap holds live events only.
// One queue per simulation: no global state.
//
// The heap holds 16-byte entries, (time, seq and slot), and an event's kind and id wait in its slot: four
// children are one cache line, and the sifts move half the bytes of whole events. A keyed event's key is
// its slot.

#include <bit>
#include <cassert>
#include <cstdint>
#include <vector>

#include "support/expected.hpp"

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

  void push(double time_s, std::uint32_t kind, std::int32_t id) { insert(time_s, kind, id, false); }
  /// A keyed event: the returned key names it to move() and erase() until it leaves by pop() (whose event
  /// carries it) or erase(); then the key may be handed out again.
  std::uint32_t push_keyed(double time_s, std::uint32_t kind, std::int32_t id) {
    return insert(time_s, kind, id, true);
  }
  /// The keyed event to `time_s`, with a new seq: it leaves where a fresh push now would.
  void move(std::uint32_t key, double time_s) {
    assert(time_s >= 0);
    const std::size_t i = pos_[key];
    Entry e = heap_[i];
    const std::uint64_t t = time_bits(time_s);
    const bool earlier = t < e.time;
    e.time = t;
    e.order = order(key);
    heap_[i] = e;
    if (earlier)
      sift_up(i);
    else
      sift_down(i);  // later, or the same time with a later seq
  }
  /// Takes the keyed event out.
  void erase(std::uint32_t key) {
    const std::size_t i = pos_[key];
    free_.push_back(key);
    const Entry last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    const bool up = i > 0 && less(last, heap_[(i - 1) / kArity]);
    place(i, last);
    if (up)
      sift_up(i);
    else
      sift_down(i);
  }
  [[nodiscard]] bool empty() const { return heap_.empty(); }
  [[nodiscard]] std::size_t size() const { return heap_.size(); }
  [[nodiscard]] Event top() const { return event_of(heap_.front()); }
  [[nodiscard]] double top_time_s() const { return std::bit_cast<double>(heap_.front().time); }
  Event pop() {
    const Event e = event_of(heap_.front());
    free_.push_back(slot_of(heap_.front()));
    const Entry last = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) {
      place(0, last);
      sift_down(0);
    }
    return e;
  }
  void reserve(std::size_t n) { heap_.reserve(n); }

 private:
  static constexpr std::size_t kArity = 4;  // half the levels of a binary heap, four children in one cache line
  // An entry's second word: its seq above its slot. Seqs are unique, so (time, order) orders as (time, seq).
  static constexpr int kSlotBits = 28;  // 268M events at once
  static constexpr std::uint64_t kSlotMask = (std::uint64_t(1) << kSlotBits) - 1;
  static constexpr std::uint64_t kMaxSeq = std::uint64_t(1) << (64 - kSlotBits);  // 68.7G pushes and moves

  struct Entry {
    std::uint64_t time;   // the bits of a non-negative double order as its value does
    std::uint64_t order;  // seq << kSlotBits | slot
  };
  struct Slot {
    std::uint32_t kind = 0;
    std::int32_t id = 0;
    bool keyed = false;
  };

  // Without branches: which of two events comes first is data the CPU cannot predict. (time, order)
  // compare as one 128-bit unsigned key: a compare and a subtract with borrow, no floating-point compare.
  static bool less(const Entry& a, const Entry& b) { return key128(a) < key128(b); }
  __extension__ typedef unsigned __int128 Key128;  // GCC's and Clang's; the extension keeps -Wpedantic quiet
  static Key128 key128(const Entry& e) { return (static_cast<Key128>(e.time) << 64) | e.order; }
  // Times are never negative; -0 + 0 is +0, whose bits order below every positive time's.
  static std::uint64_t time_bits(double t) { return std::bit_cast<std::uint64_t>(t + 0.0); }
  static std::uint32_t slot_of(const Entry& e) { return static_cast<std::uint32_t>(e.order & kSlotMask); }

  std::uint64_t order(std::uint32_t slot) {
    CHARM_ASSERT(next_seq_ < kMaxSeq, "an event queue numbers at most 2^36 pushes and moves");
    return (next_seq_++ << kSlotBits) | slot;
  }
  Event event_of(const Entry& e) const {
    const std::uint32_t s = slot_of(e);
    const Slot& p = slots_[s];
    return {std::bit_cast<double>(e.time), e.order >> kSlotBits, p.kind, p.id, p.keyed ? s : kNoKey};
  }
  std::uint32_t insert(double time_s, std::uint32_t kind, std::int32_t id, bool keyed) {
    assert(time_s >= 0);
    std::uint32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      CHARM_ASSERT(slots_.size() <= kSlotMask, "an event queue holds at most 2^28 events at once");
      s = static_cast<std::uint32_t>(slots_.size());
      slots_.emplace_back();
      pos_.push_back(0);
    }
    slots_[s] = {kind, id, keyed};
    heap_.push_back(Entry{time_bits(time_s), order(s)});
    sift_up(heap_.size() - 1);
    return s;
  }
  /// Puts e at place i, and tells its slot where.
  void place(std::size_t i, const Entry& e) {
    heap_[i] = e;
    pos_[slot_of(e)] = static_cast<std::uint32_t>(i);
  }
  void sift_up(std::size_t i) {
    const Entry e = heap_[i];
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
    const Entry e = heap_[i];
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

  std::vector<Entry> heap_;
  std::vector<Slot> slots_;          // per slot: its event's kind and id, and whether it is keyed
  std::vector<std::uint32_t> pos_;   // per slot: its event's place in heap_
  std::vector<std::uint32_t> free_;  // slots whose events left
  std::uint64_t next_seq_ = 0;
};

}  // namespace charm::sim
