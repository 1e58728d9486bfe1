#pragma once
// A set of rank ids kept as sorted disjoint half-open intervals: the blocks
// merged into an accumulator are almost always a few aligned runs, so this
// stays tiny even at thousands of ranks.

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace charm::sched {

class IntervalSet {
 public:
  /// Adds x; false if it was already there.
  bool insert(std::int32_t x) {
    // In place (runs stay sorted, disjoint and non-adjacent): one insert per
    // compute op in the validator, so no temporary set and no reallocation of
    // runs_ when x extends a run, which is the common case.
    auto it =
        std::lower_bound(runs_.begin(), runs_.end(), x, [](const auto& r, std::int32_t v) { return r.second < v; });
    if (it != runs_.end() && it->first <= x && x < it->second) return false;
    if (it != runs_.end() && it->second == x) {
      it->second = x + 1;
      if (auto nx = it + 1; nx != runs_.end() && nx->first == x + 1) {
        it->second = nx->second;
        runs_.erase(nx);
      }
      return true;
    }
    if (it != runs_.end() && it->first == x + 1)
      it->first = x;
    else
      runs_.insert(it, {x, x + 1});
    return true;
  }
  /// Adds [lo, hi), which lies after every element (ascending construction).
  void append(std::int32_t lo, std::int32_t hi) { add_run({lo, hi}); }
  /// Adds every element of o; returns the elements that were already present.
  IntervalSet merge(const IntervalSet& o) {
    IntervalSet overlap;
    // In place when the sets do not interleave (a partial merged into an
    // accumulator usually lies wholly after or before it): no new vector.
    if (o.runs_.empty()) return overlap;
    if (runs_.empty()) {
      runs_ = o.runs_;
      return overlap;
    }
    if (o.runs_.front().first >= runs_.back().second) {
      auto from = o.runs_.begin();
      if (from->first == runs_.back().second) runs_.back().second = (from++)->second;
      runs_.insert(runs_.end(), from, o.runs_.end());
      return overlap;
    }
    if (o.runs_.back().second <= runs_.front().first) {
      auto to = o.runs_.end();
      if (o.runs_.back().second == runs_.front().first) runs_.front().first = (--to)->first;
      runs_.insert(runs_.begin(), o.runs_.begin(), to);
      return overlap;
    }
    // The merged runs go to a per-thread scratch vector that then trades
    // buffers with runs_: no allocation per merge once the scratch has grown.
    thread_local std::vector<std::pair<std::int32_t, std::int32_t>> out;
    out.clear();
    out.reserve(runs_.size() + o.runs_.size());
    std::size_t i = 0, j = 0;
    auto push = [&](std::pair<std::int32_t, std::int32_t> r) {
      if (!out.empty() && r.first <= out.back().second) {
        if (r.first < out.back().second) overlap.add_run({r.first, std::min(r.second, out.back().second)});
        out.back().second = std::max(out.back().second, r.second);
      } else {
        out.push_back(r);
      }
    };
    while (i < runs_.size() || j < o.runs_.size()) {
      if (j == o.runs_.size() || (i < runs_.size() && runs_[i].first <= o.runs_[j].first))
        push(runs_[i++]);
      else
        push(o.runs_[j++]);
    }
    runs_.swap(out);
    return overlap;
  }
  [[nodiscard]] IntervalSet minus(const IntervalSet& o) const {
    IntervalSet out;
    std::size_t j = 0;
    for (auto [lo, hi] : runs_) {
      std::int32_t cur = lo;
      while (j < o.runs_.size() && o.runs_[j].second <= cur) ++j;
      std::size_t k = j;
      while (cur < hi) {
        if (k == o.runs_.size() || o.runs_[k].first >= hi) {
          out.add_run({cur, hi});
          break;
        }
        if (o.runs_[k].first > cur) out.add_run({cur, o.runs_[k].first});
        cur = std::max(cur, o.runs_[k].second);
        ++k;
      }
    }
    return out;
  }
  [[nodiscard]] bool empty() const { return runs_.empty(); }
  /// The runs [lo, hi), ascending.
  [[nodiscard]] const std::vector<std::pair<std::int32_t, std::int32_t>>& runs() const { return runs_; }
  bool operator==(const IntervalSet& o) const { return runs_ == o.runs_; }
  [[nodiscard]] std::string str() const {
    std::string s = "{";
    for (auto [lo, hi] : runs_) {
      if (s.size() > 1) s += ",";
      s += hi - lo == 1 ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi - 1);
    }
    return s + "}";
  }

 private:
  void add_run(std::pair<std::int32_t, std::int32_t> r) {
    if (!runs_.empty() && runs_.back().second >= r.first)
      runs_.back().second = std::max(runs_.back().second, r.second);
    else
      runs_.push_back(r);
  }
  std::vector<std::pair<std::int32_t, std::int32_t>> runs_;
};

}  // namespace charm::sched
