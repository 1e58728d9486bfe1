#pragma once
// The validator's symbolic state for coverage: one Cell per (owner, kv head,
// token part) of a root buffer, holding the set of blocks merged into it.
//
// A cell's set is an IntervalSet of runs. A region plan's set may fragment:
// TASP brings each KV part from another owner, so a query cell gathers blocks
// in a scattered order and its runs grow to thousands (each insert a memmove).
// Past 32 runs, once a bitmap over the blocks [0, blocks) is no larger than
// its runs, the set becomes that bitmap (bitmaps are pooled and reused).
// Plain plans never fragment and never pay for it.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "scheduler/validate/interval_set.hpp"

namespace charm::sched {

struct Cell {
  IntervalSet set;          // blocks merged in (unless dense)
  std::int32_t dense = -1;  // index of its bitmap in the store once the runs fragment
  bool written = false;
  bool bundle_ok = true;  // QBundle: packed from a final output
};

class CellStore {
 public:
  /// `cells` empty cells over blocks [0, blocks); `merge_densifies`: merge() may turn an
  /// accumulator into a bitmap (region plans; add() always may).
  void reset(std::size_t cells, std::size_t blocks, bool merge_densifies) {
    cells_.assign(cells, {});
    words_ = (blocks + 63) / 64;
    merge_densifies_ = merge_densifies;
    dense_.clear();
    free_dense_.clear();
  }
  [[nodiscard]] std::size_t size() const { return cells_.size(); }
  Cell& operator[](std::size_t c) { return cells_[c]; }
  const Cell& operator[](std::size_t c) const { return cells_[c]; }

  /// Adds block e to a cell; false if it was there.
  bool add(Cell& c, std::int32_t e) {
    if (c.dense >= 0) {
      auto& w = dense_[std::size_t(c.dense)][std::size_t(e) / 64];
      const std::uint64_t bit = std::uint64_t{1} << (e % 64);
      if (w & bit) return false;
      w |= bit;
      return true;
    }
    const bool fresh = c.set.insert(e);
    if (fragmented(c)) densify(c);
    return fresh;
  }
  /// A cell's blocks as runs.
  [[nodiscard]] IntervalSet blocks_of(const Cell& c) const {
    if (c.dense < 0) return c.set;
    IntervalSet s;
    for_bits(dense_[std::size_t(c.dense)], [&](std::int32_t e) { s.append(e, e + 1); });
    return s;
  }
  [[nodiscard]] bool same_blocks(const Cell& c, const IntervalSet& want) const {
    return c.dense < 0 ? c.set == want : blocks_of(c) == want;
  }
  /// d := s (a receive or a copy), bitmaps copied, not shared.
  void assign(Cell& d, const Cell& s) {
    if (s.dense < 0) {
      undensify(d);
      d.set = s.set;
    } else {
      if (d.dense < 0) {
        d.set = IntervalSet{};
        densify(d);
      }
      dense_[std::size_t(d.dense)] = dense_[std::size_t(s.dense)];
    }
    d.written = s.written;
    d.bundle_ok = s.bundle_ok;
  }
  /// acc += part; returns the blocks both held.
  IntervalSet merge(Cell& acc, const Cell& part) {
    if (acc.dense < 0 && part.dense < 0) {
      auto overlap = acc.set.merge(part.set);
      if (merge_densifies_ && fragmented(acc)) densify(acc);
      return overlap;
    }
    if (acc.dense < 0) densify(acc);
    auto& w = dense_[std::size_t(acc.dense)];
    IntervalSet overlap;
    if (part.dense >= 0) {
      const auto& v = dense_[std::size_t(part.dense)];
      for (std::size_t k = 0; k < w.size(); ++k) {
        for (std::uint64_t x = w[k] & v[k]; x != 0; x &= x - 1) {
          const auto e = std::int32_t(k * 64 + std::size_t(std::countr_zero(x)));
          overlap.append(e, e + 1);
        }
        w[k] |= v[k];
      }
      return overlap;
    }
    for (auto [lo, hi] : part.set.runs())
      for (std::int32_t e = lo; e < hi; ++e) {
        const std::uint64_t bit = std::uint64_t{1} << (e % 64);
        if (w[std::size_t(e) / 64] & bit) overlap.append(e, e + 1);
        w[std::size_t(e) / 64] |= bit;
      }
    return overlap;
  }

 private:
  [[nodiscard]] bool fragmented(const Cell& c) const { return c.set.runs().size() > std::max<std::size_t>(32, words_); }
  template <class Fn>
  static void for_bits(const std::vector<std::uint64_t>& w, Fn&& fn) {
    for (std::size_t k = 0; k < w.size(); ++k)
      for (std::uint64_t x = w[k]; x != 0; x &= x - 1) fn(std::int32_t(k * 64 + std::size_t(std::countr_zero(x))));
  }
  void densify(Cell& c) {
    std::int32_t slot;
    if (!free_dense_.empty()) {
      slot = free_dense_.back();
      free_dense_.pop_back();
      dense_[std::size_t(slot)].assign(words_, 0);
    } else {
      slot = std::int32_t(dense_.size());
      dense_.emplace_back(words_, 0);
    }
    auto& w = dense_[std::size_t(slot)];
    for (auto [lo, hi] : c.set.runs())
      for (std::int32_t e = lo; e < hi; ++e) w[std::size_t(e) / 64] |= std::uint64_t{1} << (e % 64);
    c.set = IntervalSet{};
    c.dense = slot;
  }
  void undensify(Cell& c) {
    if (c.dense < 0) return;
    free_dense_.push_back(c.dense);
    c.dense = -1;
  }

  std::vector<Cell> cells_;
  std::size_t words_ = 0;
  bool merge_densifies_ = false;
  std::vector<std::vector<std::uint64_t>> dense_;  // bitmaps of fragmented cells
  std::vector<std::int32_t> free_dense_;
};

}  // namespace charm::sched
