#include "sim/varlen_tiles.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace charm::sim {

namespace {
using Range = ir::Workload::Range;

constexpr std::int64_t kNoWindow = std::numeric_limits<std::int64_t>::max() / 4;

/// A sequence of the kernel's: ascending, disjoint ranges of positions, its tokens numbered 0, 1, ... in order.
class Tokens {
 public:
  /// `before` is storage for the count of tokens before each range (kept from sequence to sequence).
  Tokens(const std::vector<Range>& ranges, std::vector<std::int64_t>& before) : ranges_(ranges), before_(before) {
    before_.clear();
    for (const Range& r : ranges_) {
      before_.push_back(size_);
      size_ += r.count;
    }
  }
  [[nodiscard]] std::int64_t size() const { return size_; }
  /// The position of token i (0 <= i < size()).
  [[nodiscard]] std::int64_t at(std::int64_t i) const {
    const auto r = std::size_t(std::upper_bound(before_.begin(), before_.end(), i) - before_.begin() - 1);
    return ranges_[r].begin + (i - before_[r]);
  }
  /// How many tokens lie below position p.
  [[nodiscard]] std::int64_t below(std::int64_t p) const {
    const auto it =
        std::upper_bound(ranges_.begin(), ranges_.end(), p, [](std::int64_t x, const Range& r) { return x < r.begin; });
    if (it == ranges_.begin()) return 0;
    const auto r = std::size_t(it - ranges_.begin() - 1);
    return before_[r] + std::min(p - ranges_[r].begin, ranges_[r].count);
  }

 private:
  const std::vector<Range>& ranges_;
  std::vector<std::int64_t>& before_;  // tokens in the ranges before each
  std::int64_t size_ = 0;
};

/// Tiles of `size` tokens, counted from token 0, that meet tokens [begin, end).
double tiles_meeting(std::int64_t begin, std::int64_t end, int size) {
  if (end <= begin) return 0;
  return double((end + size - 1) / size - begin / size);
}

/// Keeps the parts of `ranges` within [lo, hi).
void clip(std::vector<Range>& ranges, std::int64_t lo, std::int64_t hi) {
  std::size_t kept = 0;
  for (const Range& r : ranges) {
    const std::int64_t a = std::max(r.begin, lo), b = std::min(r.begin + r.count, hi);
    if (a < b) ranges[kept++] = {a, b - a};
  }
  ranges.resize(kept);
}

/// Trims one document's piece to the queries that see a key and the keys a query sees.
void trim(VarlenPiece& p, std::int64_t window) {
  if (p.q.empty() || p.k.empty()) return;
  clip(p.q, p.k.front().begin, kNoWindow);  // a query sees only keys at or before it
  if (p.q.empty()) return;
  const std::int64_t last_q = p.q.back().begin + p.q.back().count - 1;
  clip(p.k, window < kNoWindow ? p.q.front().begin - window + 1 : -kNoWindow, last_q + 1);
}
}  // namespace

double VarlenPiece::count_pairs(std::int64_t window) const {
  double sum = 0;
  for (const Range& a : q)
    for (const Range& b : k) sum += ir::band_pairs(a.begin, a.begin + a.count, b.begin, b.begin + b.count, window);
  return sum;
}

DocumentShards::DocumentShards(const ir::Workload& w, int ranks) : docs_(w, ranks) {}

std::span<const VarlenPiece> DocumentShards::pieces(int q_rank, int kv_rank) const {
  const ir::Workload& w = docs_.workload();
  if (!w.position_mask()) return {};
  const std::vector<Part>& qs = docs_.parts(q_rank);
  const std::vector<Part>& ks = docs_.parts(kv_rank);
  const std::int64_t window = w.window > 0 ? w.window : kNoWindow;
  // The pieces are written over the last call's, whose ranges keep their storage: no allocation per block.
  std::size_t n = 0;
  std::size_t i = 0, j = 0;
  while (i < qs.size() && j < ks.size()) {
    const std::size_t d = std::max(qs[i].document, ks[j].document);
    if (n == scratch_.size()) scratch_.emplace_back();
    VarlenPiece& p = scratch_[n];
    p.q.clear();
    p.k.clear();
    for (; i < qs.size() && qs[i].document <= d; ++i)
      if (qs[i].document == d) p.q.push_back(qs[i].range);
    for (; j < ks.size() && ks[j].document <= d; ++j)
      if (ks[j].document == d) p.k.push_back(ks[j].range);
    trim(p, window);
    if (p.q.empty() || p.k.empty()) continue;
    p.pairs = p.count_pairs(w.window);
    if (p.pairs > 0) ++n;
  }
  return {scratch_.data(), n};
}

std::int64_t DocumentShards::shape(int q_rank, int kv_rank) const {
  if (docs_.thd_cut()) return kv_rank < q_rank ? -1 : kv_rank == q_rank ? -2 : -3;
  return std::int64_t(q_rank) * docs_.ranks() + kv_rank;
}

std::vector<VarlenPiece> varlen_pieces(const ir::Workload& w, int q_rank, int kv_rank, int ranks) {
  const DocumentShards shards(w, ranks);
  const auto pieces = shards.pieces(q_rank, kv_rank);
  return {pieces.begin(), pieces.end()};
}

TileLoops varlen_tile_loops(std::span<const VarlenPiece> pieces, std::int64_t window, topo::KernelTile tile, bool fwd) {
  TileLoops loops;
  const auto add = [&](double loop) {
    loops.sum += loop;
    loops.longest = std::max(loops.longest, loop);
  };
  const std::int64_t reach = window > 0 ? window : kNoWindow;
  std::vector<std::int64_t> q_before, k_before;
  for (const VarlenPiece& p : pieces) {
    const Tokens q(p.q, q_before), k(p.k, k_before);
    if (fwd) {
      // Query tile [i, i + tile.q) sees the keys from its first query's first to its last query.
      for (std::int64_t i = 0; i < q.size(); i += tile.q) {
        const std::int64_t first = q.at(i), last = q.at(std::min(q.size(), i + tile.q) - 1);
        add(tiles_meeting(k.below(first - reach + 1), k.below(last + 1), tile.kv));
      }
    } else {
      // Key tile [j, j + tile.q) is read by the queries from its first key to its last key's last reader.
      for (std::int64_t j = 0; j < k.size(); j += tile.q) {
        const std::int64_t first = k.at(j), last = k.at(std::min(k.size(), j + tile.q) - 1);
        add(tiles_meeting(q.below(first), q.below(last + reach), tile.kv));
      }
    }
  }
  return loops;
}

}  // namespace charm::sim
